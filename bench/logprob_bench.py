"""Benchmark of the linear log-prob (forward + backward) at Qwen3's vocabulary, in one table.

    python bench/logprob_bench.py            # on a CUDA GPU (written for an H200): three shapes, ~1-2 min
    python bench/logprob_bench.py --quick    # small shapes, CPU or GPU: smoke test of the torch paths
    TRITON_INTERPRET=1 python bench/logprob_bench.py --quick --iters 1   # CPU, the Triton rows too (slow)

Rows per shape (T tokens, H hidden, V vocabulary), all bf16 inputs with fp32 softmax:
  naive        log_softmax((h @ W.T).float()) gathered: T x V logits in bf16 and fp32
  chunked      chunked_linear_logprob (below): 2048-token chunks, logits recomputed in backward
  liger        LigerFusedLinearCrossEntropyLoss(reduction="none"), if liger_kernel imports
  three GEMMs  h @ W.T, g @ W and g.T @ h in bf16 with preallocated outputs: the practical floor
  ours         fused.fused_linear_logprob (four GEMMs: a sweep of 512-token chunks for the log-probs, and
               one more for the gradients in backward)
  sweep        fused.linear_token_loss, the GRPO-loss variant (three GEMMs: loss and gradients in one
               sweep of 512-token chunks; and 256-token chunks), with token_loss = sum(upstream * logprob),
               whose gradients are exactly those of the other rows
Time: median of CUDA-event timings of forward + backward (upstream gradient random), after warm-up.
Peak extra: torch.cuda.max_memory_allocated() during one step minus what was allocated before it (the
inputs); it includes the bf16 gradients of h and W, which every method must return, so the table also
shows it net of them. TFLOP/s counts the three GEMMs' 6*T*H*V flops for every row.
Not measured here: correctness (tests/test_fused.py does that; sanity lines compare ours and the sweep
with the fp32 reference at the first shape, gradients included).
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the repository root, for fused.py
from compute import fused  # noqa: E402

SHAPES = [(8192, 2048, 151936), (32768, 2048, 151936), (8192, 4096, 151936)]   # (T, H, V)
QUICK_SHAPES = [(128, 64, 1000), (256, 64, 3001)]
WARMUP = 2
GIB = 2 ** 30


def naive(hidden, weight, targets):
    return fused.logprobs_from_logits(hidden @ weight.T, targets)


def _chunk_logprob(hidden, weight, targets, temperature):
    return fused.logprobs_from_logits(hidden @ weight.T, targets, temperature)   # GEMM in the input dtype


def chunked_linear_logprob(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                           temperature: float = 1.0, chunk_tokens: int = 2048) -> torch.Tensor:
    """Token-chunked torch: each chunk's logits (GEMM in the input dtype, softmax in fp32) are freed after
    its forward and rebuilt in backward (activation checkpointing), so only one chunk of logits lives."""
    parts = [checkpoint(_chunk_logprob, hidden[i:i + chunk_tokens], weight, targets[i:i + chunk_tokens],
                        temperature, use_reentrant=False)
             for i in range(0, hidden.shape[0], chunk_tokens)]
    return torch.cat(parts)


def chunked(hidden, weight, targets):
    return chunked_linear_logprob(hidden, weight, targets, chunk_tokens=2048)


def sweep_step(hidden, weight, targets, upstream, knobs=fused.Sweep()):
    """linear_token_loss with the loss sum(upstream * logprob): the same gradients as method_step's."""
    def token_loss(logprobs, rows):
        return (logprobs * upstream[rows]).sum()

    def step():
        hidden.grad = weight.grad = None
        fused.linear_token_loss(hidden, weight, targets, token_loss, sweep=knobs)[0].backward()
    return step


def liger_fn():
    """Liger's fused linear cross-entropy as a log-prob function, or None when liger_kernel is absent."""
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        return None
    loss_fn = LigerFusedLinearCrossEntropyLoss(reduction="none")

    def liger(hidden, weight, targets):
        loss = loss_fn(weight, hidden, targets)
        loss = loss[0] if isinstance(loss, tuple) else getattr(loss, "loss", loss)   # newer versions wrap it
        return -loss
    return liger


def timed(step, iters, cuda):
    """(median milliseconds, peak extra bytes or None) of step() after WARMUP untimed calls."""
    for _ in range(WARMUP):
        step()
    times = []
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            start = time.perf_counter()
            step()
            times.append(1e3 * (time.perf_counter() - start))
    peak = torch.cuda.max_memory_allocated() - base if cuda else None
    return statistics.median(times), peak


def method_step(fn, hidden, weight, targets, upstream):
    """Forward + backward of one log-prob function; the previous step's gradients are dropped first so
    that one step's memory is measured, gradients included."""
    def step():
        hidden.grad = weight.grad = None
        fn(hidden, weight, targets).backward(upstream)
    return step


def three_gemm_step(hidden, weight):
    """The floor: the three GEMMs of this shape in bf16, outputs preallocated, nothing else."""
    h, w = hidden.detach(), weight.detach()
    logits = torch.empty(h.shape[0], w.shape[0], device=h.device, dtype=h.dtype)   # doubles as dlogits
    grad_h, grad_w = torch.empty_like(h), torch.empty_like(w)

    def step():
        torch.mm(h, w.t(), out=logits)
        torch.mm(logits, w, out=grad_h)
        torch.mm(logits.t(), h, out=grad_w)
    return step


def sanity_lines(hidden, weight, targets, upstream):
    """Ours and the sweep against the fp32 reference (TF32 off) at the first shape: the largest log-prob
    difference and the norm-wise relative error of both gradients (the sweep rounds grad_weight once per
    chunk: 16 times at 8192 tokens)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    runs = {"fp32 reference": lambda h, w: fused.linear_logprob_reference(h.float(), w.float(), targets),
            "ours": lambda h, w: fused.fused_linear_logprob(h, w, targets),
            "sweep": lambda h, w: fused.linear_token_loss(h, w, targets, lambda lp, rows: (lp * upstream[rows]).sum())}
    results = {}
    for name, run in runs.items():
        h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
        out = run(h, w)
        if name == "sweep":
            out[0].backward()
            out = out[1]
        else:
            out.backward(upstream)
        results[name] = out.detach(), h.grad.double(), w.grad.double()
        del h, w, out
    exact = results.pop("fp32 reference")
    return "\n".join(
        f"sanity: {name} vs fp32 reference: max |d logprob| {(r[0] - exact[0]).abs().max():.2e}, relative error "
        + ", ".join(f"grad {g} {((a - b).norm() / b.norm()).item():.2e}" for g, a, b in
                    (("hidden", r[1], exact[1]), ("weight", r[2], exact[2])))
        for name, r in results.items())


def bench_shape(T, H, V, iters, device, liger, want_sanity):
    cuda = device.type == "cuda"
    triton_runs = cuda or os.environ.get("TRITON_INTERPRET") == "1"   # the interpreter: a smoke test on CPU
    gen = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(T, H, device=device, generator=gen).to(torch.bfloat16).requires_grad_()
    weight = (torch.randn(V, H, device=device, generator=gen) / H ** 0.5).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, V, (T,), device=device, generator=gen)
    upstream = torch.randn(T, device=device, generator=gen)
    # Each row is a factory of its step (built only when its turn comes, so that one row's buffers never
    # sit under another's measurement) or a string saying why it was not run.
    def step_of(fn):
        return lambda: method_step(fn, hidden, weight, targets, upstream)
    rows = {
        "naive": step_of(naive),
        "chunked": step_of(chunked),
        "liger": (step_of(liger) if liger else "liger_kernel not installed") if cuda else "needs CUDA",
        "three GEMMs": lambda: three_gemm_step(hidden, weight),
        "ours": step_of(fused.fused_linear_logprob) if triton_runs else "needs CUDA (Triton)",
        "sweep": (lambda: sweep_step(hidden, weight, targets, upstream)) if triton_runs else "needs CUDA (Triton)",
        "sweep C=256": (lambda: sweep_step(hidden, weight, targets, upstream, fused.Sweep(chunk_tokens=256)))
                       if triton_runs else "needs CUDA (Triton)",
    }
    results = {}
    for name, make_step in rows.items():
        if isinstance(make_step, str):
            results[name] = make_step
            continue
        step = make_step()
        try:
            results[name] = timed(step, iters, cuda)
        except Exception as error:     # a row that failed (OOM, Triton compile, ...), with its reason
            results[name] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:60]}"
        del step
        hidden.grad = weight.grad = None
        if cuda:
            torch.cuda.empty_cache()
    sanity = sanity_lines(hidden, weight, targets, upstream) if want_sanity and triton_runs else None
    return results, (T * H + V * H) * 2, sanity


def print_header():
    header = f"{'T, H, V':>20} | {'method':<13} | {'ms fwd+bwd':>10} | {'x 3 GEMMs':>9} | {'TFLOP/s':>7} | " \
             f"{'peak extra GiB':>14} | {'net of grads GiB':>16}"
    print(header)
    print("-" * len(header), flush=True)


def print_table(rows):
    for (T, H, V), results, grad_bytes in rows:
        floor = results["three GEMMs"][0] if isinstance(results["three GEMMs"], tuple) else None
        for name, result in results.items():
            shape = f"{T}, {H}, {V}"
            if isinstance(result, str):
                print(f"{shape:>20} | {name:<13} | {result}")
                continue
            ms, peak = result
            ratio = f"{ms / floor:.2f}" if floor else "-"
            tflops = 6 * T * H * V / (ms * 1e-3) / 1e12
            memory = "-" if peak is None or name == "three GEMMs" else f"{peak / GIB:.2f}"
            net = "-" if memory == "-" else f"{(peak - grad_bytes) / GIB:.2f}"
            print(f"{shape:>20} | {name:<13} | {ms:>10.2f} | {ratio:>9} | {tflops:>7.3g} | {memory:>14} | {net:>16}",
                  flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes; runs on CPU (torch paths only)")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per method (median reported)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.quick:
        print("logprob_bench: no CUDA device, nothing to measure (use --quick for a CPU smoke test of the torch paths)")
        return
    device = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    print(f"logprob_bench on {name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"median of {args.iters} after {WARMUP} warm-up")
    liger = liger_fn()
    print_header()
    for i, (T, H, V) in enumerate(QUICK_SHAPES if args.quick else SHAPES):   # each shape printed when measured
        results, grad_bytes, sanity = bench_shape(T, H, V, args.iters, device, liger, i == 0)
        print_table([((T, H, V), results, grad_bytes)])
        if sanity:
            print(sanity, flush=True)


if __name__ == "__main__":
    main()
