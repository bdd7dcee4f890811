"""The GRPO-loss sweep: a loss and its gradients in ONE sweep, three GEMMs instead of four.

kernels.fused_linear_logprob must recompute the logits in backward because the upstream gradient of a
token arrives only then. A GRPO loss is a sum of per-token terms f_t(logprob_t) whose constants
(advantage, old and rollout log-probs, weights) are known before the forward, so its upstream gradient
f_t' can be formed as soon as a token's log-sum-exp is. Token chunks then carry their whole vocabulary
row:

    per chunk of C tokens:  z = hidden[C] @ weight.T       cuBLAS, fp32 output   [C, V] fp32
                            lse, logprob                   Triton, one program per row
                            g = d loss / d logprob         torch autograd on the [C] vector
                            dlogits = g (onehot - p) / T   Triton, written in place over z (bf16)
                            grad_hidden[C] = dlogits @ weight                 cuBLAS
                            grad_weight += dlogits.T @ hidden[C]              cuBLAS (addmm)

Extra memory: one fp32 chunk of logits (C x V x 4: 0.29 GiB at C = 512, V = 151,936) beside the bf16
gradients. The price: grad_weight is accumulated over T / C chunks in its own dtype, one rounding
per chunk (bench/NOTES.md). The update uses it on CUDA (grpo.fused_grpo_loss).

Run: `python -m pytest tests/test_kernels.py -q` (CPU via TRITON_INTERPRET=1, against float64).
"""
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class Sweep:
    """Knobs of linear_token_loss; defaults chosen on paper for an H200 (bench/NOTES.md). Tests shrink them."""
    chunk_tokens: int = 512     # tokens per chunk: its fp32 logits are chunk_tokens x V x 4 bytes
    block_v: int = 4096         # vocabulary entries per step of the row kernels
    num_warps: int = 8          # of the row kernels
    split_k: int = 4            # batched GEMMs the grad_hidden reduction over V is split into


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
        m_new = tl.maximum(m, tl.max(z, 0))            # finite: every block has a column < V
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), 0)
        m = m_new
        picked += tl.sum(tl.where(cols == target, z, 0.0), 0)
    tl.store(lse_ptr + row, m + tl.log(s))
    tl.store(picked_ptr + row, picked)


@triton.jit
def _row_dlogits_kernel(z_ptr, d_ptr, tgt_ptr, lse_ptr, scale_ptr, V, z_stride, d_stride, inv_temp,
                        BV: tl.constexpr):
    """d[row] = scale[row] * (onehot(target) - exp(z * inv_temp - lse)), one program per row. d may be z's
    own row reinterpreted as bf16: blocks go left to right, and block j's store covers only bytes that
    blocks 0..j have loaded, once the barrier has made every warp's loads of them complete."""
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


def _matmul_fp32(a, b):
    """a @ b (2-D or batched) with fp32 output: bf16 tensor-core products summed in fp32 (cuBLAS on CUDA;
    CPU has no mm.dtype kernel and gets the same numbers by widening first)."""
    if a.is_cuda and a.dtype != torch.float32:
        return (torch.bmm if a.dim() == 3 else torch.mm)(a, b, out_dtype=torch.float32)
    return a.float() @ b.float()


def _grad_hidden_chunk(dlogits, weight, split_k, out):
    """out = dlogits @ weight, the reduction over the vocabulary split into split_k batched GEMMs summed
    in fp32. One GEMM of a C-token chunk has only (C / 128) x (H / 128) output tiles, 64 at C = 512 and
    H = 2048, which fills half of an H200's 132 SMs unless cuBLAS happens to split K itself."""
    V = dlogits.shape[1]
    while V % split_k:
        split_k //= 2
    parts = _matmul_fp32(dlogits.unflatten(1, (split_k, V // split_k)).transpose(0, 1),
                         weight.view(split_k, V // split_k, -1))           # [split_k, C, H] fp32
    out.copy_(parts.sum(0))


def _token_loss_sweep(hidden, weight, targets, token_loss, temperature, sweep, need):
    """(loss, logprobs [T], grad_hidden or None, grad_weight or None) in one sweep over token chunks."""
    T, V = hidden.shape[0], weight.shape[0]
    cpu = hidden.device.type == "cpu"
    logprobs = torch.empty(T, device=hidden.device, dtype=torch.float32)
    loss = torch.zeros((), device=hidden.device, dtype=torch.float32)
    grad_hidden = torch.empty_like(hidden) if need[0] else None
    grad_weight = torch.zeros_like(weight) if need[1] else None
    launch = dict(BV=sweep.block_v, num_warps=sweep.num_warps)
    for start in range(0, T, sweep.chunk_tokens):
        rows = slice(start, min(start + sweep.chunk_tokens, T))
        h, tgt = hidden[rows], targets[rows]
        z = _matmul_fp32(h, weight.t())                                    # [C, V] fp32
        lse, picked = torch.empty(2, h.shape[0], device=h.device, dtype=torch.float32)
        _row_lse_kernel[(h.shape[0],)](z, tgt, lse, picked, V, z.stride(0), 1.0 / temperature, **launch)
        chunk_logprobs = torch.where(tgt >= 0, picked - lse, 0.0)
        with torch.enable_grad():
            leaf = chunk_logprobs.detach().requires_grad_()
            chunk_loss = token_loss(leaf, rows)
            upstream = torch.zeros_like(leaf)
            if chunk_loss.requires_grad:
                upstream = torch.autograd.grad(chunk_loss, leaf, allow_unused=True)[0]
                upstream = torch.zeros_like(leaf) if upstream is None else upstream
        logprobs[rows], loss = chunk_logprobs, loss + chunk_loss.detach()
        scale = torch.where(tgt >= 0, upstream.float() / temperature, 0.0).contiguous()
        # In place over z, in the GEMMs' dtype. The interpreter truncates fp32 -> bf16 stores where the
        # GPU rounds to nearest-even: on CPU the kernel writes fp32 and torch rounds.
        narrow = not cpu and hidden.element_size() < 4
        d = z.view(hidden.dtype)[:, :V] if narrow else z
        _row_dlogits_kernel[(h.shape[0],)](z, d, tgt, lse, scale, V, z.stride(0), d.stride(0), 1.0 / temperature,
                                           **launch)
        d = d if narrow else d.to(hidden.dtype)
        if need[0]:
            _grad_hidden_chunk(d, weight, sweep.split_k, grad_hidden[rows])
        if need[1]:
            grad_weight.addmm_(d.t(), h)
        del z, d                                         # free before the next chunk is allocated
    return loss, logprobs, grad_hidden, grad_weight


class _LinearTokenLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, token_loss, temperature, sweep):
        loss, logprobs, grad_hidden, grad_weight = _token_loss_sweep(
            hidden, weight, targets, token_loss, temperature, sweep, ctx.needs_input_grad[:2])
        ctx.grads = grad_hidden, grad_weight             # not saved tensors: backward consumes them once
        ctx.mark_non_differentiable(logprobs)
        return loss, logprobs

    @staticmethod
    def backward(ctx, grad_loss, _grad_logprobs):
        grads, ctx.grads = ctx.grads, None               # scaled in place: no second copy of grad_weight
        grads = tuple(None if g is None else g.mul_(grad_loss.to(g.dtype)) for g in grads)
        return *grads, None, None, None, None


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
    assert hidden.dim() == 2 and weight.dim() == 2 and hidden.shape[1] == weight.shape[1], \
        f"want hidden [T, H] and weight [V, H], got {tuple(hidden.shape)} and {tuple(weight.shape)}"
    assert targets.shape == hidden.shape[:1] and temperature > 0
    assert hidden.dtype == weight.dtype and hidden.dtype in (torch.bfloat16, torch.float16, torch.float32), \
        f"hidden and weight must share a float dtype, got {hidden.dtype} and {weight.dtype}"
    assert all(type(x) in (torch.Tensor, torch.nn.Parameter) for x in (hidden, weight)), \
        f"plain tensors only, got {type(hidden).__name__} and {type(weight).__name__}"
    assert int(targets.max()) < weight.shape[0], f"target {int(targets.max())} >= vocabulary {weight.shape[0]}"
    return _LinearTokenLoss.apply(hidden.contiguous(), weight.contiguous(), targets.contiguous(), token_loss,
                                  float(temperature), sweep)
