"""Fused linear log-prob: log_softmax(hidden @ weight.T / temperature)[target] without the logits.

The GRPO hot spot is the policy's log-prob of each trained token under Qwen3's 151,936-entry vocabulary.
The plain way materialises T x V fp32 logits (18.6 GiB at 8k tokens); `fused_linear_logprob` never holds
more than a (token block x vocabulary block) tile of them on chip, plus, in backward, one vocabulary chunk
of bf16 logit gradients in memory:

    forward   per token block, loop over the vocabulary in tiles: tile GEMM hidden @ weight.T (fp32
              accumulation), running max / sum-exp (online log-sum-exp), pick the target's logit.
              Saves hidden, weight, targets and the per-token LSE: T floats beyond the inputs.
    backward  per vocabulary chunk (default 128 MiB of bf16): recompute the logit tiles from the LSE,
              dlogits = upstream * (onehot(target) - softmax) / temperature, stored in the input dtype;
              grad_weight[chunk] = dlogits.T @ hidden (one cuBLAS GEMM over all tokens, no accumulation);
              grad_hidden += dlogits @ weight[chunk] (Triton GEMM into a T x H fp32 accumulator).

Extra memory, beyond the inputs and the gradients themselves: T x H x 4 bytes (the fp32 grad_hidden
accumulator) + one dlogits chunk + O(T). Work: four GEMM-sized passes (forward, recompute, two grads),
against three for a method that keeps the logits, so the ideal is 4/3 of the three-GEMM time.

The GRPO-loss variant, three GEMMs for a loss rather than a log-prob function, is sweep.py; the
update uses it on CUDA. Designs, predictions and measurements of both: bench/NOTES.md.

Run: `python -m pytest tests/test_kernels.py -q` (runs the Triton code on CPU via TRITON_INTERPRET=1),
`python bench/logprob_bench.py` on a CUDA GPU (`--quick` for a CPU smoke test of the torch paths).

Deliberately not here: a bias, label smoothing, logit soft-capping, and the CCE-style trick of skipping
gradient tiles whose softmax is negligible (an approximation).
Targets < 0 (e.g. -100) are ignored: log-prob 0 and no gradient. fp32 inputs use TF32 tensor cores on
GPU (about 1e-3 relative, like torch with allow_tf32); bf16 inputs are exact products, fp32 sums.
"""
from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class Tiles:
    """Block sizes and launch knobs; defaults chosen on paper for Hopper (bench/NOTES.md). Tests shrink them."""
    block_t: int = 128              # tokens per tile (rows of the logits tile, and of grad_hidden tiles)
    block_v: int = 128              # vocabulary entries per tile (columns; also grad_hidden tile width)
    block_k: int = 64               # reduction step of every tile GEMM
    num_warps: int = 8              # two warpgroups per program: Hopper's wgmma works per warpgroup
    num_stages: int = 3             # shared-memory pipeline depth of the reduction loops
    group: int = 8                  # row-blocks per L2 swizzle group in the 2-D grids
    chunk_bytes: int = 128 << 20    # backward: size of one vocabulary chunk of dlogits [T, chunk]
    num_splits: int | None = None   # forward: vocabulary splits per token block (None: fill the GPU)


# ---------------------------------------------------------------------------------------------------
# Triton kernels. Weight is [V, H] and hidden [T, H], both row-major. UPCAST is set when running in
# the CPU interpreter, which cannot do bf16 arithmetic (its tl.dot multiplies the raw bf16 bit
# patterns, triton-lang/triton#11584): operands are widened to fp32 there, which is exact, and the
# products are what the GPU's bf16 tensor cores compute (exact products, fp32 accumulation).
# ---------------------------------------------------------------------------------------------------

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
    m = tl.full((BT,), float("-inf"), tl.float32)        # running max of the scaled logits
    s = tl.zeros((BT,), tl.float32)                       # running sum of exp(logit - m)
    picked = tl.zeros((BT,), tl.float32)
    for v0 in range(v_start, v_end, BV):
        cols = v0 + tl.arange(0, BV)
        z = _logits_tile(h_ptr, w_ptr, rows, cols, T, V, H, BT, BV, BK, UPCAST) * inv_temp
        z = tl.where(cols[None, :] < v_end, z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, 1))              # finite: every tile has a column < v_end
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new[:, None]), 1)
        m = m_new
        picked += tl.sum(tl.where(cols[None, :] == targets[:, None], z, 0.0), 1)
    out = split * T + rows
    tl.store(lse_ptr + out, m + tl.log(s), mask=rows < T)
    tl.store(picked_ptr + out, picked, mask=rows < T)


@triton.jit
def _dlogits_kernel(h_ptr, w_ptr, tgt_ptr, lse_ptr, scale_ptr, d_ptr, T, VC, H, v_offset, inv_temp,
                    BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                    UPCAST: tl.constexpr):
    """dlogits[t, v] = scale[t] * (onehot(target[t])[v] - softmax[t, v]) for one vocabulary chunk
    (w_ptr points at its first row, VC rows); scale = upstream / temperature, 0 for ignored tokens."""
    pid_t, pid_v = _grouped_tile(tl.program_id(0), tl.cdiv(T, BT), tl.cdiv(VC, BV), GROUP)
    rows = pid_t * BT + tl.arange(0, BT)
    cols = pid_v * BV + tl.arange(0, BV)
    z = _logits_tile(h_ptr, w_ptr, rows, cols, T, VC, H, BT, BV, BK, UPCAST) * inv_temp
    lse = tl.load(lse_ptr + rows, mask=rows < T, other=0.0)
    scale = tl.load(scale_ptr + rows, mask=rows < T, other=0.0)
    local_target = tl.load(tgt_ptr + rows, mask=rows < T, other=-1) - v_offset
    onehot = tl.where(cols[None, :] == local_target[:, None], 1.0, 0.0)
    d = scale[:, None] * (onehot - tl.exp(z - lse[:, None]))
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


# ---------------------------------------------------------------------------------------------------
# Launch helpers (pure functions of the shapes, so they can be checked by hand).
# ---------------------------------------------------------------------------------------------------

def num_vocab_splits(num_token_blocks: int, num_sms: int, max_splits: int = 8) -> int:
    """Forward splits of the vocabulary per token block, so the grid fills whole waves of SMs.

    The forward grid is (token blocks x splits); a partial last wave idles SMs. Pick the split count
    with the best wave efficiency (rounded to 2 digits), the fewest splits among ties.
    >>> num_vocab_splits(64, 132)    # 8192 tokens / 128: one split fills 64 of 132 SMs, two fill 128
    2
    >>> num_vocab_splits(256, 132)   # 32768 tokens: 256 programs in 2 waves of 132 is already 97%
    1
    """
    def efficiency(splits: int) -> float:
        programs = num_token_blocks * splits
        return round(programs / (triton.cdiv(programs, num_sms) * num_sms), 2)
    return max(range(1, max_splits + 1), key=lambda s: (efficiency(s), -s))


def vocab_chunk(num_tokens: int, element_size: int, tiles: Tiles) -> int:
    """Backward vocabulary chunk width: as many columns as fit chunk_bytes, whole tiles, at least one.
    >>> vocab_chunk(8192, 2, Tiles())    # 128 MiB of bf16 dlogits at 8192 tokens
    8192
    >>> vocab_chunk(32768, 2, Tiles())
    2048
    """
    columns = tiles.chunk_bytes // (num_tokens * element_size)
    return max(tiles.block_v, columns // tiles.block_v * tiles.block_v)


@lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1                       # the CPU interpreter runs programs one by one
    return torch.cuda.get_device_properties(device).multi_processor_count


def _forward(hidden, weight, targets, temperature, tiles):
    """(logprobs [T] fp32, lse [T] fp32) with the Triton forward kernel."""
    (T, H), V = hidden.shape, weight.shape[0]
    num_blocks, num_tiles = triton.cdiv(T, tiles.block_t), triton.cdiv(V, tiles.block_v)
    splits = tiles.num_splits or num_vocab_splits(num_blocks, _num_sms(hidden.device))
    tiles_per_split = triton.cdiv(num_tiles, min(splits, num_tiles))
    splits = triton.cdiv(num_tiles, tiles_per_split)   # no empty split
    lse_parts = torch.empty(splits, T, device=hidden.device, dtype=torch.float32)
    picked_parts = torch.empty_like(lse_parts)
    _forward_kernel[(num_blocks, splits)](
        hidden, weight, targets, lse_parts, picked_parts, T, V, H, tiles_per_split * tiles.block_v,
        1.0 / temperature, BT=tiles.block_t, BV=tiles.block_v, BK=tiles.block_k,
        UPCAST=hidden.device.type == "cpu", num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    lse = torch.logsumexp(lse_parts, dim=0)
    logprobs = torch.where(targets >= 0, picked_parts.sum(0) - lse, 0.0)
    return logprobs, lse


def _backward(hidden, weight, targets, lse, grad_logprobs, temperature, tiles, need_hidden, need_weight):
    """(grad_hidden, grad_weight), each None when not needed, one vocabulary chunk at a time.

    Why chunks of dlogits in memory rather than one fused kernel: grad_hidden for a token block needs a
    [block, H] accumulator across the whole vocabulary (1 MiB at 128 x 2048 fp32, 4x an SM's register
    file), and likewise grad_weight for a vocabulary block across all tokens; keeping them in global
    memory means fp32 read-modify-writes (or atomics) at every tile, ~160 GB of traffic at 8k tokens, and
    an fp32 [V, H] grad_weight buffer is itself 1.16 GiB at H = 2048. A chunk of dlogits in bf16 instead
    costs 6 bytes of traffic (one write, two reads) per 6 H flops, and lets grad_weight[chunk] be one
    plain GEMM over all tokens (cuBLAS), written once in the output dtype.
    """
    (T, H), V = hidden.shape, weight.shape[0]
    upcast = hidden.device.type == "cpu"
    scale = torch.where(targets >= 0, grad_logprobs.float() / temperature, 0.0).contiguous()
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
    if need_hidden:
        grad_hidden = grad_hidden.to(hidden.dtype)
    return grad_hidden, grad_weight


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
        grad_hidden, grad_weight = _backward(hidden, weight, targets, lse, grad_logprobs, ctx.temperature,
                                             ctx.tiles, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        return grad_hidden, grad_weight, None, None, None


def fused_linear_logprob(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         temperature: float = 1.0, *, tiles: Tiles = Tiles()) -> torch.Tensor:
    """log_softmax(hidden @ weight.T / temperature)[t, targets[t]] as float32 [T], differentiable in hidden
    and weight, in Triton (CUDA, or CPU under TRITON_INTERPRET=1). targets < 0 give 0 and no gradient.

    hidden [T, H] and weight [V, H] share one dtype (bf16, fp16 or fp32); targets [T] integer.
    Example: with weight = [[0, 0], [1, 0]] (V=2) and hidden = [[1, 0]], the logits are [0, 1], so
    fused_linear_logprob(hidden, weight, tensor([1])) = 1 - log(e^0 + e^1) = -0.3133.
    """
    assert hidden.dim() == 2 and weight.dim() == 2 and hidden.shape[1] == weight.shape[1], \
        f"want hidden [T, H] and weight [V, H], got {tuple(hidden.shape)} and {tuple(weight.shape)}"
    assert targets.shape == hidden.shape[:1], f"want targets [{hidden.shape[0]}], got {tuple(targets.shape)}"
    assert hidden.dtype == weight.dtype and hidden.dtype in (torch.bfloat16, torch.float16, torch.float32), \
        f"hidden and weight must share a float dtype, got {hidden.dtype} and {weight.dtype}"
    assert hidden.shape[0] > 0 and temperature > 0, "need at least one token and a positive temperature"
    # Triton reads raw memory: a tensor subclass such as FSDP2's sharded DTensor would be read past its
    # local shard. Gather it first (weight.full_tensor(), which autograd differentiates through).
    assert all(type(x) in (torch.Tensor, torch.nn.Parameter) for x in (hidden, weight)), \
        f"plain tensors only, got {type(hidden).__name__} and {type(weight).__name__}"
    # Fails loudly on an out-of-vocabulary target, at the price of one device sync per call.
    assert int(targets.max()) < weight.shape[0], f"target {int(targets.max())} >= vocabulary {weight.shape[0]}"
    return _FusedLinearLogprob.apply(hidden.contiguous(), weight.contiguous(), targets.contiguous(),
                                     float(temperature), tiles)


# ---------------------------------------------------------------------------------------------------
# Plain-torch references: the CPU path, the tests' ground truth and two of the bench's baselines.
# ---------------------------------------------------------------------------------------------------

def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / temperature)[t, targets[t]], 0 where targets < 0; computed in >= fp32.
    >>> logprobs_from_logits(torch.tensor([[0.0, 1.0]]), torch.tensor([1]))   # 1 - log(1 + e)
    tensor([-0.3133])
    """
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


def _chunk_logprob(hidden, weight, targets, temperature):
    return logprobs_from_logits(hidden @ weight.T, targets, temperature)   # GEMM in the input dtype


def chunked_linear_logprob(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                           temperature: float = 1.0, chunk_tokens: int = 2048) -> torch.Tensor:
    """Token-chunked torch: each chunk's logits (GEMM in the input dtype, softmax in fp32) are freed after
    its forward and rebuilt in backward (activation checkpointing), so only one chunk of logits lives."""
    parts = [checkpoint(_chunk_logprob, hidden[i:i + chunk_tokens], weight, targets[i:i + chunk_tokens],
                        temperature, use_reentrant=False)
             for i in range(0, hidden.shape[0], chunk_tokens)]
    return torch.cat(parts)


def logprob_fn(device):
    """The log-prob function for a device: the Triton kernel on CUDA, the fp32 torch reference elsewhere
    (the Triton interpreter is for tests only: far too slow for a model's vocabulary)."""
    return fused_linear_logprob if torch.device(device).type == "cuda" else linear_logprob_reference
