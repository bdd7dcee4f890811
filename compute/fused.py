"""The fused output-layer kernels (Triton): log-probs and the GRPO loss without the T x V logits.

Plain torch materialises T x V fp32 logits to score each trained token (18.5 GiB at 32k tokens of
Qwen3's 151,936-entry vocabulary); here the tokens go a chunk at a time (`Sweep`), and per chunk: its fp32
logits (one GEMM, C x V x 4 bytes), a Triton row kernel's log-sum-exp and target logit, the loss's
per-token gradient, dlogits written in place over the logits by a second row kernel, and both gradients
(two GEMMs; grad_weight summed over the chunks in fp32, V x H x 4 bytes). Two entry points share it:
  linear_token_loss  a loss that is a sum of per-token terms f_t(logprob_t) (GRPO's: the CUDA default,
      grpo.fused_grpo_loss): the gradients are formed in the forward sweep. Three GEMMs.
  fused_linear_logprob  log-probs for any upstream gradient: the forward sweeps for the log-probs alone
      (one GEMM); the backward sweeps again with the upstream gradient as each token's loss. Four GEMMs.
The torch references are the path off CUDA (`logprob_fn`) and the tests' ground truth. Targets < 0 are
ignored. Not here: a bias, label smoothing, soft-capping, DTensor inputs (gather first). Designs and
predictions: bench/NOTES.md; tests: tests/test_fused.py (Triton's interpreter on CPU).
"""
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class Sweep:
    """The sweep's knobs, chosen on paper for an H200. Tests shrink them."""
    chunk_tokens: int = 512     # tokens per chunk: its fp32 logits are chunk_tokens x V x 4 bytes
    block_v: int = 4096         # vocabulary entries per step of the row kernels
    num_warps: int = 8          # of the row kernels
    split_k: int = 4            # batched GEMMs the grad_hidden reduction over V is split into


# --- Triton: one program per row of a chunk's fp32 logits z [C, V], row-major.

@triton.jit
def _row_lse_kernel(z_ptr, tgt_ptr, lse_ptr, picked_ptr, V, stride, inv_temp, BV: tl.constexpr):
    """The row's log-sum-exp of z * inv_temp, online (a running max m and sum s of exp(z - m)), and the
    target's scaled logit."""
    row = tl.program_id(0)
    target = tl.load(tgt_ptr + row)
    z_row = z_ptr + row.to(tl.int64) * stride
    m = float("-inf")
    s = 0.0
    picked = 0.0
    for v0 in range(0, V, BV):
        cols = v0 + tl.arange(0, BV)
        z = tl.load(z_row + cols, mask=cols < V, other=float("-inf")) * inv_temp
        m_new = tl.maximum(m, tl.max(z, 0))             # finite: every block has a valid column
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), 0)
        m, picked = m_new, picked + tl.sum(tl.where(cols == target, z, 0.0), 0)
    tl.store(lse_ptr + row, m + tl.log(s))
    tl.store(picked_ptr + row, picked)


@triton.jit
def _row_dlogits_kernel(z_ptr, d_ptr, tgt_ptr, lse_ptr, scale_ptr, V, z_stride, d_stride, inv_temp,
                        BV: tl.constexpr):
    """The row's dlogits = scale * (onehot - softmax(z * inv_temp)). d may be z's own row reinterpreted as bf16:
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
        d = scale * (tl.where(cols == target, 1.0, 0.0) - tl.exp(z - lse))
        tl.debug_barrier()      # every warp has loaded the bytes this store may overwrite (bar.sync)
        tl.store(d_row + cols, d.to(d_ptr.dtype.element_ty), mask=cols < V)


# --- Host side: the input contract, and the row kernels as torch custom ops. Under a FakeTensorMode, as in
# bench/memory_bench.py's simulation of the update, they are no-ops and the tensors around them keep their sizes.

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


# --- The sweep over token chunks, and its two entry points.

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
    """(loss, logprobs [T], grad_hidden or None, grad_weight (fp32) or None) in one sweep over token chunks;
    token_loss None: the log-probs alone. grad_weight sums the chunks in fp32: in bf16 each chunk's
    addition would round it again."""
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
        logprobs[rows] = chunk_logprobs = torch.where(tgt >= 0, picked - lse, 0.0)
        if token_loss is None:   # the log-probs alone; this chunk's logits freed before the next one's
            del z
            continue
        chunk_loss, upstream = _chunk_upstream(token_loss, chunk_logprobs, rows)
        loss = loss + chunk_loss
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


class _FusedLinearLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, sweep):
        ctx.save_for_backward(hidden, weight, targets)
        ctx.temperature, ctx.sweep = temperature, sweep
        return _token_loss_sweep(hidden, weight, targets, None, temperature, sweep, (False, False))[1]

    @staticmethod
    def backward(ctx, grad_logprobs):
        hidden, weight, targets = ctx.saved_tensors
        _, _, grad_hidden, grad_weight = _token_loss_sweep(   # each token's loss: its log-prob times its upstream
            hidden, weight, targets, lambda logprobs, rows: (logprobs * grad_logprobs[rows]).sum(), ctx.temperature,
            ctx.sweep, ctx.needs_input_grad[:2])
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None


def fused_linear_logprob(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         temperature: float = 1.0, *, sweep: Sweep = Sweep()) -> torch.Tensor:
    """log_softmax(hidden @ weight.T / temperature)[t, targets[t]] as float32 [T], differentiable in hidden
    and weight, in Triton (CUDA, or CPU under TRITON_INTERPRET=1). targets < 0 give 0 and no gradient.

    hidden [T, H] and weight [V, H] share one dtype (bf16, fp16 or fp32); targets [T] integer.
    Example: with weight = [[0, 0], [1, 0]] (V=2) and hidden = [[1, 0]], the logits are [0, 1], so
    fused_linear_logprob(hidden, weight, tensor([1])) = 1 - log(e^0 + e^1) = -0.3133.
    """
    return _FusedLinearLogprob.apply(*_checked(hidden, weight, targets, temperature), float(temperature), sweep)


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
