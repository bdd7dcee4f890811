"""The fused output-layer kernels (Triton): log-probs and the GRPO loss without the T x V logits.

Plain torch materialises T x V fp32 logits to score each trained token (18.6 GiB at 8k tokens of
Qwen3's 151,936-entry vocabulary); these hold one tile, or one token chunk, at a time:
  fused_linear_logprob  forward: an online log-sum-exp over vocabulary tiles, saving only the LSE;
      backward: per vocabulary chunk, dlogits recomputed, then both gradients. Four GEMM-sized passes.
  linear_token_loss  a loss that is a sum of per-token terms f_t(logprob_t) (GRPO's: the CUDA default,
      grpo.fused_grpo_loss): per token chunk, logits, LSE, f', dlogits and both gradients, all in the
      forward. Three GEMMs; grad_weight is summed over the chunks in fp32 (V x H x 4 bytes).
The torch references are the path off CUDA (`logprob_fn`) and the tests' ground truth. Targets < 0 are
ignored. Not here: a bias, label smoothing, soft-capping, DTensor inputs (gather first). Designs and
measurements: bench/NOTES.md; tests: tests/test_fused.py (Triton's interpreter on CPU).
"""
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class Tiles:
    """fused_linear_logprob's block sizes and launch knobs, chosen on paper for Hopper. Tests shrink them."""
    block_t: int = 128              # tokens per tile (rows of the logits tile, and of grad_hidden tiles)
    block_v: int = 128              # vocabulary entries per tile (columns; also grad_hidden tile width)
    block_k: int = 64               # reduction step of every tile GEMM
    num_warps: int = 8              # two warpgroups per program: Hopper's wgmma works per warpgroup
    num_stages: int = 3             # shared-memory pipeline depth of the reduction loops
    group: int = 8                  # row-blocks per L2 swizzle group in the 2-D grids
    chunk_bytes: int = 128 << 20    # backward: size of one vocabulary chunk of dlogits [T, chunk]
    num_splits: int | None = None   # forward: vocabulary splits per token block (None: fill the GPU)


@dataclass(frozen=True)
class Sweep:
    """linear_token_loss's knobs, chosen on paper for an H200. Tests shrink them."""
    chunk_tokens: int = 512     # tokens per chunk: its fp32 logits are chunk_tokens x V x 4 bytes
    block_v: int = 4096         # vocabulary entries per step of the row kernels
    num_warps: int = 8          # of the row kernels
    split_k: int = 4            # batched GEMMs the grad_hidden reduction over V is split into


# --- Triton, weight [V, H] and hidden [T, H] row-major; the first two helpers are both paths' math. UPCAST:
# the CPU interpreter's bf16 tl.dot multiplies raw bit patterns (triton#11584), so operands go to fp32 (exact).

@triton.jit
def _lse_step(m, s, picked, z, hit, AXIS: tl.constexpr):
    """Online log-sum-exp along AXIS of scaled logits z: (running max m, sum s of exp(z - m), picked + z[hit])."""
    m_new = tl.maximum(m, tl.max(z, AXIS))             # finite: every block has a valid column
    s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - tl.expand_dims(m_new, AXIS)), AXIS)
    return m_new, s, picked + tl.sum(tl.where(hit, z, 0.0), AXIS)


@triton.jit
def _softmax_grad(z, lse, scale, hit, AXIS: tl.constexpr):
    """dlogits = scale * (onehot - softmax) of a block z of scaled logits, given its rows' lse and scale."""
    return tl.expand_dims(scale, AXIS) * (tl.where(hit, 1.0, 0.0) - tl.exp(z - tl.expand_dims(lse, AXIS)))


@triton.jit
def _logits_tile(h_ptr, w_ptr, rows, cols, T, V, H,
                 BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr):
    """fp32 tile hidden[rows] @ weight[cols].T; rows >= T or cols >= V read zeros."""
    ks = tl.arange(0, BK)
    h_ptrs = h_ptr + rows[:, None].to(tl.int64) * H + ks[None, :]
    w_ptrs = w_ptr + cols[:, None].to(tl.int64) * H + ks[None, :]
    acc = tl.zeros((BT, BV), tl.float32)
    for k0 in range(0, H, BK):
        k_ok = (k0 + ks)[None, :] < H
        h = tl.load(h_ptrs, mask=(rows[:, None] < T) & k_ok, other=0.0)
        w = tl.load(w_ptrs, mask=(cols[:, None] < V) & k_ok, other=0.0)
        if UPCAST:
            h = h.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(h, tl.trans(w), acc)
        h_ptrs += BK
        w_ptrs += BK
    return acc


@triton.jit
def _grouped_tile(pid, num_m, num_n, GROUP: tl.constexpr):
    """Program id -> (row block, column block), walking GROUP row blocks at a time, so that the programs
    resident together reuse each other's operand tiles from L2 instead of HBM."""
    per_group = GROUP * num_n
    first_m = (pid // per_group) * GROUP
    rows_in_group = tl.minimum(num_m - first_m, GROUP)
    return first_m + (pid % per_group) % rows_in_group, (pid % per_group) // rows_in_group


@triton.jit
def _forward_kernel(h_ptr, w_ptr, tgt_ptr, lse_ptr, picked_ptr, T, V, H, v_per_split, inv_temp,
                    BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr):
    """Grid (token blocks, vocabulary splits). Each program sweeps its split of the vocabulary and writes,
    per token, the split's log-sum-exp and the target's scaled logit (0 when the target is elsewhere)."""
    split = tl.program_id(1)
    rows = tl.program_id(0) * BT + tl.arange(0, BT)
    targets = tl.load(tgt_ptr + rows, mask=rows < T, other=-1)
    v_start = split * v_per_split
    v_end = tl.minimum(v_start + v_per_split, V)
    m = tl.full((BT,), float("-inf"), tl.float32)
    s = tl.zeros((BT,), tl.float32)
    picked = tl.zeros((BT,), tl.float32)
    for v0 in range(v_start, v_end, BV):
        cols = v0 + tl.arange(0, BV)
        z = _logits_tile(h_ptr, w_ptr, rows, cols, T, V, H, BT, BV, BK, UPCAST) * inv_temp
        z = tl.where(cols[None, :] < v_end, z, float("-inf"))
        m, s, picked = _lse_step(m, s, picked, z, cols[None, :] == targets[:, None], 1)
    out = split * T + rows
    tl.store(lse_ptr + out, m + tl.log(s), mask=rows < T)
    tl.store(picked_ptr + out, picked, mask=rows < T)


@triton.jit
def _dlogits_kernel(h_ptr, w_ptr, tgt_ptr, lse_ptr, scale_ptr, d_ptr, T, VC, H, v_offset, inv_temp,
                    BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                    UPCAST: tl.constexpr):
    """dlogits of one vocabulary chunk (w_ptr points at its first row, VC rows), recomputing its logits."""
    pid_t, pid_v = _grouped_tile(tl.program_id(0), tl.cdiv(T, BT), tl.cdiv(VC, BV), GROUP)
    rows = pid_t * BT + tl.arange(0, BT)
    cols = pid_v * BV + tl.arange(0, BV)
    z = _logits_tile(h_ptr, w_ptr, rows, cols, T, VC, H, BT, BV, BK, UPCAST) * inv_temp
    lse = tl.load(lse_ptr + rows, mask=rows < T, other=0.0)
    scale = tl.load(scale_ptr + rows, mask=rows < T, other=0.0)
    local_target = tl.load(tgt_ptr + rows, mask=rows < T, other=-1) - v_offset
    d = _softmax_grad(z, lse, scale, cols[None, :] == local_target[:, None], 1)
    mask = (rows[:, None] < T) & (cols[None, :] < VC)
    tl.store(d_ptr + rows[:, None].to(tl.int64) * VC + cols[None, :], d, mask=mask)


@triton.jit
def _accumulate_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                              GROUP: tl.constexpr, UPCAST: tl.constexpr):
    """c[M, N] (fp32) += a[M, K] @ b[K, N], all row-major; here grad_hidden += dlogits @ weight[chunk]."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * K + ks[None, :]
    b_ptrs = b_ptr + ks[:, None].to(tl.int64) * N + rn[None, :]
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    # Start from c rather than adding it at the end: the tensor cores accumulate in registers, and a
    # second live [BM, BN] fp32 tile in the epilogue made ptxas spill at BN = 256.
    acc = tl.load(c_ptrs, mask=c_mask, other=0.0)
    for k0 in range(0, K, BK):
        k_ok = (k0 + ks) < K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & (rn[None, :] < N), other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(c_ptrs, acc, mask=c_mask)


@triton.jit
def _row_lse_kernel(z_ptr, tgt_ptr, lse_ptr, picked_ptr, V, stride, inv_temp, BV: tl.constexpr):
    """One program per row of the fp32 logits: log-sum-exp of z * inv_temp and the target's scaled logit."""
    row = tl.program_id(0)
    target = tl.load(tgt_ptr + row)
    z_row = z_ptr + row.to(tl.int64) * stride
    m = float("-inf")
    s = 0.0
    picked = 0.0
    for v0 in range(0, V, BV):
        cols = v0 + tl.arange(0, BV)
        z = tl.load(z_row + cols, mask=cols < V, other=float("-inf")) * inv_temp
        m, s, picked = _lse_step(m, s, picked, z, cols == target, 0)
    tl.store(lse_ptr + row, m + tl.log(s))
    tl.store(picked_ptr + row, picked)


@triton.jit
def _row_dlogits_kernel(z_ptr, d_ptr, tgt_ptr, lse_ptr, scale_ptr, V, z_stride, d_stride, inv_temp,
                        BV: tl.constexpr):
    """dlogits of one row of the fp32 logits per program. d may be z's own row reinterpreted as bf16:
    blocks go left to right, and block j's store covers only bytes that blocks 0..j have loaded, once
    the barrier has made every warp's loads of them complete."""
    row = tl.program_id(0)
    target = tl.load(tgt_ptr + row)
    lse = tl.load(lse_ptr + row)
    scale = tl.load(scale_ptr + row)
    z_row = z_ptr + row.to(tl.int64) * z_stride
    d_row = d_ptr + row.to(tl.int64) * d_stride
    for v0 in range(0, V, BV):
        cols = v0 + tl.arange(0, BV)
        z = tl.load(z_row + cols, mask=cols < V, other=0.0) * inv_temp
        d = _softmax_grad(z, lse, scale, cols == target, 0)
        tl.debug_barrier()      # every warp has loaded the bytes this store may overwrite (bar.sync)
        tl.store(d_row + cols, d.to(d_ptr.dtype.element_ty), mask=cols < V)


# --- Host side shared by both paths: the input contract, and pure functions of the shapes.

def _checked(hidden, weight, targets, temperature):
    """(hidden, weight, targets) made contiguous, once they meet the contract both entry points share."""
    assert hidden.dim() == 2 and weight.dim() == 2 and hidden.shape[1] == weight.shape[1], \
        f"want hidden [T, H] and weight [V, H], got {tuple(hidden.shape)} and {tuple(weight.shape)}"
    assert targets.shape == hidden.shape[:1], f"want targets [{hidden.shape[0]}], got {tuple(targets.shape)}"
    assert hidden.dtype == weight.dtype and hidden.dtype in (torch.bfloat16, torch.float16, torch.float32), \
        f"hidden and weight must share a float dtype, got {hidden.dtype} and {weight.dtype}"
    assert hidden.shape[0] > 0 and temperature > 0, "need at least one token and a positive temperature"
    # Triton reads raw memory, past a DTensor's local shard: gather it first (weight.full_tensor()).
    from torch.distributed.tensor import DTensor
    assert not any(isinstance(x, DTensor) for x in (hidden, weight)), "plain tensors only, not DTensors"
    # Targets must lie in the vocabulary (one that does not would score 0): checking it here would read a
    # value back to the host, so the caller checks its token lists (grpo.accumulate_gradients does).
    return hidden.contiguous(), weight.contiguous(), targets.contiguous()


def _dlogits_scale(upstream, targets, temperature):
    """Per-token factor of dlogits: upstream / temperature, 0 for ignored targets."""
    return torch.where(targets >= 0, upstream.float() / temperature, 0.0).contiguous()


def num_vocab_splits(num_token_blocks: int, num_sms: int, max_splits: int = 8) -> int:
    """Forward splits of the vocabulary per token block, so that the grid (token blocks x splits) fills
    whole waves of SMs: the best wave efficiency (rounded to 2 digits), the fewest splits among ties.
    2 at (64 blocks, 132 SMs): 128 programs; 1 at 256 blocks, already 97% of two waves."""
    def efficiency(splits: int) -> float:
        programs = num_token_blocks * splits
        return round(programs / (triton.cdiv(programs, num_sms) * num_sms), 2)
    return max(range(1, max_splits + 1), key=lambda s: (efficiency(s), -s))


def vocab_chunk(num_tokens: int, element_size: int, tiles: Tiles) -> int:
    """Backward vocabulary chunk width: as many columns as fit chunk_bytes, whole tiles, at least one
    (8192 at 8192 bf16 tokens, 2048 at 32768)."""
    columns = tiles.chunk_bytes // (num_tokens * element_size)
    return max(tiles.block_v, columns // tiles.block_v * tiles.block_v)


# --- fused_linear_logprob: online-LSE forward, vocabulary-chunked backward.

def _forward(hidden, weight, targets, temperature, tiles):
    """(logprobs [T] fp32, lse [T] fp32) with the Triton forward kernel."""
    T, V = hidden.shape[0], weight.shape[0]
    num_blocks, num_tiles = triton.cdiv(T, tiles.block_t), triton.cdiv(V, tiles.block_v)
    # The CPU interpreter runs programs one by one: one "SM".
    num_sms = torch.cuda.get_device_properties(hidden.device).multi_processor_count if hidden.is_cuda else 1
    splits = tiles.num_splits or num_vocab_splits(num_blocks, num_sms)
    tiles_per_split = triton.cdiv(num_tiles, min(splits, num_tiles))
    splits = triton.cdiv(num_tiles, tiles_per_split)   # no empty split
    lse_parts = torch.empty(splits, T, device=hidden.device, dtype=torch.float32)
    picked_parts = torch.empty_like(lse_parts)
    _forward_launch(hidden, weight, targets, lse_parts, picked_parts, tiles_per_split * tiles.block_v,
                    1.0 / temperature, tiles.block_t, tiles.block_v, tiles.block_k, tiles.num_warps, tiles.num_stages)
    lse = torch.logsumexp(lse_parts, dim=0)
    return torch.where(targets >= 0, picked_parts.sum(0) - lse, 0.0), lse


# Kernels that allocate nothing are launched as torch custom ops (`triton_op`): under a FakeTensorMode, as in
# bench/memory_bench.py's simulation of the update, they are no-ops and the tensors around them keep their sizes.

@torch.library.triton_op("spade::linear_logprob_forward", mutates_args={"lse", "picked"})
def _forward_launch(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor,
                    picked: torch.Tensor, v_per_split: int, inv_temp: float, block_t: int, block_v: int,
                    block_k: int, num_warps: int, num_stages: int) -> None:
    (T, H), V = hidden.shape, weight.shape[0]
    grid = (triton.cdiv(T, block_t), lse.shape[0])
    torch.library.wrap_triton(_forward_kernel)[grid](
        hidden, weight, targets, lse, picked, T, V, H, v_per_split, inv_temp, BT=block_t, BV=block_v, BK=block_k,
        UPCAST=hidden.device.type == "cpu", num_warps=num_warps, num_stages=num_stages)


@torch.library.triton_op("spade::row_lse", mutates_args={"lse", "picked"})
def _row_lse(z: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, picked: torch.Tensor, V: int,
             inv_temp: float, block_v: int, num_warps: int) -> None:
    torch.library.wrap_triton(_row_lse_kernel)[(z.shape[0],)](z, targets, lse, picked, V, z.stride(0), inv_temp,
                                                               BV=block_v, num_warps=num_warps)


@torch.library.triton_op("spade::row_dlogits", mutates_args={"d"})
def _row_dlogits(z: torch.Tensor, d: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, scale: torch.Tensor,
                 V: int, inv_temp: float, block_v: int, num_warps: int) -> None:
    torch.library.wrap_triton(_row_dlogits_kernel)[(z.shape[0],)](z, d, targets, lse, scale, V, z.stride(0), d.stride(0),
                                                                   inv_temp, BV=block_v, num_warps=num_warps)


def _backward(hidden, weight, targets, lse, grad_logprobs, temperature, tiles, need_hidden, need_weight):
    """(grad_hidden, grad_weight), each None when not needed, per vocabulary chunk of dlogits in memory:
    fused, [block, H] fp32 accumulators would not fit on chip (1 MiB at H = 2048), and in global memory
    cost ~160 GB of traffic at 8k tokens; a bf16 chunk costs 6 bytes per 6 H flops (bench/NOTES.md)."""
    (T, H), V = hidden.shape, weight.shape[0]
    upcast = hidden.device.type == "cpu"
    scale = _dlogits_scale(grad_logprobs, targets, temperature)
    grad_weight = torch.empty_like(weight) if need_weight else None
    grad_hidden = torch.zeros(T, H, device=hidden.device, dtype=torch.float32) if need_hidden else None
    chunk = vocab_chunk(T, hidden.element_size(), tiles)
    bt, bv, bk = tiles.block_t, tiles.block_v, tiles.block_k
    launch = dict(GROUP=tiles.group, UPCAST=upcast, num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    for v0 in range(0, V, chunk):
        w_chunk = weight[v0:v0 + chunk]                    # contiguous rows: a pointer offset, no copy
        vc = w_chunk.shape[0]
        # The interpreter truncates fp32 -> bf16 stores; torch rounds to nearest-even as the GPU does.
        dlogits = torch.empty(T, vc, device=hidden.device, dtype=torch.float32 if upcast else hidden.dtype)
        grid = (triton.cdiv(T, bt) * triton.cdiv(vc, bv),)
        _dlogits_kernel[grid](hidden, w_chunk, targets, lse, scale, dlogits, T, vc, H, v0, 1.0 / temperature,
                              BT=bt, BV=bv, BK=bk, **launch)
        dlogits = dlogits.to(hidden.dtype)
        if need_weight:
            torch.mm(dlogits.t(), hidden, out=grad_weight[v0:v0 + vc])
        if need_hidden:
            grid = (triton.cdiv(T, bt) * triton.cdiv(H, bv),)
            _accumulate_matmul_kernel[grid](dlogits, w_chunk, grad_hidden, T, H, vc, BM=bt, BN=bv, BK=bk, **launch)
        del dlogits                                         # free before the next chunk is allocated
    return None if grad_hidden is None else grad_hidden.to(hidden.dtype), grad_weight


class _FusedLinearLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, tiles):
        logprobs, lse = _forward(hidden, weight, targets, temperature, tiles)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.tiles = temperature, tiles
        return logprobs

    @staticmethod
    def backward(ctx, grad_logprobs):
        hidden, weight, targets, lse = ctx.saved_tensors
        return *_backward(hidden, weight, targets, lse, grad_logprobs, ctx.temperature, ctx.tiles,
                          *ctx.needs_input_grad[:2]), None, None, None


def fused_linear_logprob(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         temperature: float = 1.0, *, tiles: Tiles = Tiles()) -> torch.Tensor:
    """log_softmax(hidden @ weight.T / temperature)[t, targets[t]] as float32 [T], differentiable in hidden
    and weight, in Triton (CUDA, or CPU under TRITON_INTERPRET=1). targets < 0 give 0 and no gradient.

    hidden [T, H] and weight [V, H] share one dtype (bf16, fp16 or fp32); targets [T] integer.
    Example: with weight = [[0, 0], [1, 0]] (V=2) and hidden = [[1, 0]], the logits are [0, 1], so
    fused_linear_logprob(hidden, weight, tensor([1])) = 1 - log(e^0 + e^1) = -0.3133.
    """
    return _FusedLinearLogprob.apply(*_checked(hidden, weight, targets, temperature), float(temperature), tiles)


# --- linear_token_loss: a loss and its gradients in one sweep over token chunks, three GEMMs.

def _real_cpu(tensor) -> bool:
    """A CPU tensor with data. A FakeTensorMode's CPU tensors stand for CUDA ones in bench/memory_bench.py's
    simulation, so they take the CUDA branches here, whose memory is the one to measure."""
    from torch._subclasses.fake_tensor import is_fake
    return tensor.device.type == "cpu" and not is_fake(tensor)


def _matmul_fp32(a, b):
    """a @ b (2-D or batched) with fp32 output: bf16 tensor-core products summed in fp32 (cuBLAS on CUDA;
    CPU has no mm.dtype kernel and gets the same numbers by widening first)."""
    if a.dtype == torch.float32 or _real_cpu(a):
        return a.float() @ b.float()
    return (torch.bmm if a.dim() == 3 else torch.mm)(a, b, out_dtype=torch.float32)


def _grad_hidden_chunk(dlogits, weight, split_k, out):
    """out = dlogits @ weight as split_k batched GEMMs over parts of the vocabulary, summed in fp32: one
    GEMM of a 512-token chunk has 64 output tiles at H = 2048, half of an H200's 132 SMs."""
    V = dlogits.shape[1]
    while V % split_k:
        split_k //= 2
    parts = _matmul_fp32(dlogits.unflatten(1, (split_k, V // split_k)).transpose(0, 1),
                         weight.view(split_k, V // split_k, -1))           # [split_k, C, H] fp32
    out.copy_(parts.sum(0))


def _chunk_upstream(token_loss, logprobs, rows):
    """(the chunk's loss, detached; d loss / d logprobs [C], zeros where the loss does not use them)."""
    with torch.enable_grad():
        leaf = logprobs.detach().requires_grad_()
        loss = token_loss(leaf, rows)
        upstream = torch.autograd.grad(loss, leaf, allow_unused=True)[0] if loss.requires_grad else None
    return loss.detach(), torch.zeros_like(logprobs) if upstream is None else upstream


def _add_matmul_fp32(out, a, b, rows=8192):
    """out += a @ b for fp32 `out`, `rows` of it at a time: the fp32 product never needs a second `out`."""
    for r in range(0, out.shape[0], rows):
        out[r:r + rows] += _matmul_fp32(a[r:r + rows], b)


def _token_loss_sweep(hidden, weight, targets, token_loss, temperature, sweep, need):
    """(loss, logprobs [T], grad_hidden or None, grad_weight (fp32) or None) in one sweep over token chunks.
    grad_weight sums the chunks in fp32: in bf16 each chunk's addition would round it again."""
    T, V = hidden.shape[0], weight.shape[0]
    logprobs = torch.empty(T, device=hidden.device, dtype=torch.float32)
    loss = torch.zeros((), device=hidden.device, dtype=torch.float32)
    grad_hidden = torch.empty_like(hidden) if need[0] else None
    grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32) if need[1] else None
    # dlogits go in place over z, in the GEMMs' dtype. The interpreter truncates fp32 -> bf16 stores where
    # the GPU rounds to nearest-even: on CPU the kernel writes fp32 and torch rounds.
    narrow = not _real_cpu(hidden) and hidden.element_size() < 4
    for start in range(0, T, sweep.chunk_tokens):
        rows = slice(start, min(start + sweep.chunk_tokens, T))
        h, tgt = hidden[rows], targets[rows]
        z = _matmul_fp32(h, weight.t())                                    # [C, V] fp32
        lse, picked = torch.empty(2, h.shape[0], device=h.device, dtype=torch.float32)
        _row_lse(z, tgt, lse, picked, V, 1.0 / temperature, sweep.block_v, sweep.num_warps)
        chunk_logprobs = torch.where(tgt >= 0, picked - lse, 0.0)
        chunk_loss, upstream = _chunk_upstream(token_loss, chunk_logprobs, rows)
        logprobs[rows], loss = chunk_logprobs, loss + chunk_loss
        d = z.view(hidden.dtype)[:, :V] if narrow else z
        _row_dlogits(z, d, tgt, lse, _dlogits_scale(upstream, tgt, temperature), V, 1.0 / temperature,
                     sweep.block_v, sweep.num_warps)
        d = d if narrow else d.to(hidden.dtype)
        if need[0]:
            _grad_hidden_chunk(d, weight, sweep.split_k, grad_hidden[rows])
        if need[1]:
            _add_matmul_fp32(grad_weight, d.t(), h)
        del z, d                                         # free before the next chunk is allocated
    return loss, logprobs, grad_hidden, grad_weight


class _LinearTokenLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, token_loss, temperature, sweep):
        loss, logprobs, grad_hidden, grad_weight = _token_loss_sweep(
            hidden, weight, targets, token_loss, temperature, sweep, ctx.needs_input_grad[:2])
        ctx.grads = grad_hidden, grad_weight             # not saved tensors: backward consumes them once
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(logprobs)
        return loss, logprobs

    @staticmethod
    def backward(ctx, grad_loss, _grad_logprobs):
        (grad_hidden, grad_weight), ctx.grads = ctx.grads, None   # scaled in place: no second fp32 copy
        if grad_hidden is not None:
            grad_hidden = grad_hidden.mul_(grad_loss.to(grad_hidden.dtype))
        if grad_weight is not None:                      # rounded to the weight's dtype once, at the end
            grad_weight = grad_weight.mul_(grad_loss).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None, None


def linear_token_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, token_loss,
                      temperature: float = 1.0, *, sweep: Sweep = Sweep()):
    """(loss, logprobs) for a loss that is a sum of per-token terms of the log-probs
    log_softmax(hidden @ weight.T / temperature)[t, targets[t]], with its gradients formed in the
    forward sweep (three GEMMs): backward only hands them out, scaled by the upstream gradient.

    token_loss(logprobs [C] fp32, rows: slice) -> 0-d tensor: the share of the loss of the tokens
    hidden[rows]; it must not mix tokens of different chunks (a sum over tokens is fine). logprobs come
    back detached. targets < 0 give 0 and no gradient. CUDA, or CPU under TRITON_INTERPRET=1.
    Example: token_loss = lambda lp, rows: -(lp * advantage[rows]).sum() is REINFORCE.
    """
    return _LinearTokenLoss.apply(*_checked(hidden, weight, targets, temperature), token_loss, float(temperature),
                                  sweep)


# --- Plain-torch references: the path off CUDA and the tests' ground truth.

def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / temperature)[t, targets[t]], 0 where targets < 0; computed in >= fp32."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))    # [T, V]
    if temperature != 1.0:                       # skipped at 1: a T x V fp32 copy is gigabytes
        logits = logits / temperature
    picked = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0)[:, None])[:, 0]
    return torch.where(targets >= 0, picked, 0.0)


def linear_logprob_reference(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                             temperature: float = 1.0) -> torch.Tensor:
    """Same as fused_linear_logprob, materialising the T x V logits in fp32 (float64 stays float64).
    The GEMM itself runs in fp32 too, so this is the accurate path, not the fast one."""
    compute = torch.promote_types(hidden.dtype, torch.float32)
    return logprobs_from_logits(hidden.to(compute) @ weight.to(compute).T, targets, temperature)


def logprob_fn(hidden):
    """The log-prob function for these hidden states: the Triton kernel on CUDA (and in a FakeTensorMode
    simulation, which stands for CUDA), the fp32 torch reference for real CPU tensors (the Triton
    interpreter is for tests only: far too slow for a model's vocabulary)."""
    return linear_logprob_reference if _real_cpu(hidden) else fused_linear_logprob
