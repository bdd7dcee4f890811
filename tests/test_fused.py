"""Equivalence tests for fused.py: its Triton log-prob and GRPO-loss sweeps against float64 references.

Without a GPU the Triton kernels run in Triton's CPU interpreter (slow: shapes stay tiny, the chunks 8
tokens and the row steps 64 wide, so that odd sizes exercise every mask); with one, the same tests run
compiled on CUDA.
The interpreter must be chosen before triton is first imported (tl.zeros, tl.max... are themselves
jitted), and other modules import triton: when an earlier test module already did that, the Triton
tests here are rerun in a fresh process instead (test_triton_tests_in_a_fresh_process).
"""
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"   # importing torch does not import triton
TRITON_HERE = DEVICE == "cuda" or "triton" not in sys.modules or os.environ.get("TRITON_INTERPRET") == "1"
if DEVICE == "cpu" and TRITON_HERE:
    os.environ["TRITON_INTERPRET"] = "1"   # read by @triton.jit as it decorates: before triton's import
import triton.language as tl  # noqa: E402

from compute import fused  # noqa: E402

if DEVICE == "cpu" and TRITON_HERE:
    assert all("Interpreted" in type(fn).__name__ for fn in (tl.zeros, fused._row_lse_kernel)), \
        "Triton kernels were compiled despite TRITON_INTERPRET=1"
runs_triton = pytest.mark.skipif(not TRITON_HERE, reason="triton was imported compiled before this module; "
                                 "test_triton_tests_in_a_fresh_process runs these")

# 8-token chunks (T = 37: five, the last one short), 64-wide row steps (V = 203: the last one short), and the
# grad_hidden reduction split in 4 when V allows (204 = 4 x 51; 203 falls back to one GEMM).
SWEEP = fused.Sweep(chunk_tokens=8, block_v=64, num_warps=4, split_k=4)


def relative_error(actual, expected):
    """Norm-wise: |actual - expected| / |expected|, in float64."""
    return ((actual.double() - expected.double()).norm() / expected.double().norm()).item()


def make_case(num_tokens, vocab, hidden_size, dtype, seed, ignored=()):
    """Random inputs rounded to dtype; logits of std ~2, so the softmax is neither flat nor one-hot."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(num_tokens, hidden_size, generator=gen).to(dtype)
    weight = (2 * torch.randn(vocab, hidden_size, generator=gen) / hidden_size ** 0.5).to(dtype)
    targets = torch.randint(0, vocab, (num_tokens,), generator=gen)
    targets[list(ignored)] = -100
    upstream = torch.randn(num_tokens, generator=gen)
    return hidden, weight, targets, upstream


def exact_gradients(hidden, weight, targets, upstream, temperature, round_dlogits_to=None):
    """float64 (grad_hidden, grad_weight) from dlogits = upstream * (onehot - softmax) / temperature,
    optionally with dlogits rounded to a dtype first (what any bf16 tensor-core backward must do)."""
    hidden, weight = hidden.double(), weight.double()
    softmax = torch.softmax(hidden @ weight.T / temperature, dim=-1)
    onehot = torch.nn.functional.one_hot(targets.clamp(min=0), weight.shape[0]).double()
    dlogits = torch.where(targets[:, None] >= 0, upstream.double()[:, None] / temperature * (onehot - softmax), 0.0)
    if round_dlogits_to is not None:
        dlogits = dlogits.to(round_dlogits_to).double()
    return dlogits @ weight, dlogits.T @ hidden


def run_fused(hidden, weight, targets, upstream, temperature, knobs=SWEEP):
    hidden = hidden.to(DEVICE, copy=True).requires_grad_()   # a copy: leave the caller's tensors alone
    weight = weight.to(DEVICE, copy=True).requires_grad_()
    logprobs = fused.fused_linear_logprob(hidden, weight, targets.to(DEVICE), temperature, sweep=knobs)
    logprobs.backward(upstream.to(DEVICE))
    return logprobs.cpu(), hidden.grad.cpu(), weight.grad.cpu()


def test_analytic_gradient_is_autograd_of_the_reference():
    # The sign and temperature convention the kernel implements, checked against autograd in float64.
    hidden, weight, targets, upstream = make_case(9, 31, 8, torch.float64, seed=0, ignored=[2])
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    fused.linear_logprob_reference(h, w, targets, 0.7).backward(upstream.double())
    grad_hidden, grad_weight = exact_gradients(hidden, weight, targets, upstream, 0.7)
    assert relative_error(h.grad, grad_hidden) < 1e-12 and relative_error(w.grad, grad_weight) < 1e-12


@runs_triton
def test_worked_example_from_the_docstring():
    hidden, weight = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    logprob = fused.fused_linear_logprob(hidden.to(DEVICE), weight.to(DEVICE), torch.tensor([1]).to(DEVICE),
                                         sweep=SWEEP)
    assert abs(logprob.item() - (1 - math.log(1 + math.e))) < 1e-6


@runs_triton
def test_bf16_odd_sizes_match_float64_reference():
    temperature = 0.7
    hidden, weight, targets, upstream = make_case(37, 203, 32, torch.bfloat16, seed=1)
    logprobs, grad_hidden, grad_weight = run_fused(hidden, weight, targets, upstream, temperature)
    reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, temperature)
    assert relative_error(logprobs, reference) <= 1e-5      # fp32 sums of exact bf16 products
    # Gradients: a bf16 backward rounds twice (the dlogits fed to the tensor cores, and the bf16
    # result), costing ~2.2e-3 norm-wise whatever the implementation (torch's own bf16 autograd of
    # h @ W.T -> log_softmax shows ~3.5e-3 here). So: <= 1e-3 against the float64 gradient with exactly
    # those two roundings applied, and within that rounding of the exact float64 gradient.
    ideal_hidden, ideal_weight = exact_gradients(hidden, weight, targets, upstream, temperature, torch.bfloat16)
    assert relative_error(grad_hidden, ideal_hidden.bfloat16()) <= 1e-3
    assert relative_error(grad_weight, ideal_weight.bfloat16()) <= 1e-3
    exact_hidden, exact_weight = exact_gradients(hidden, weight, targets, upstream, temperature)
    assert relative_error(grad_hidden, exact_hidden) <= 4e-3
    assert relative_error(grad_weight, exact_weight) <= 4e-3


@runs_triton
def test_fp32_hidden_size_not_a_multiple_of_the_tile():
    temperature = 1.3
    hidden, weight, targets, upstream = make_case(37, 203, 40, torch.float32, seed=2)   # H = 40, block_k = 32
    logprobs, grad_hidden, grad_weight = run_fused(hidden, weight, targets, upstream, temperature)
    reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, temperature)
    exact_hidden, exact_weight = exact_gradients(hidden, weight, targets, upstream, temperature)
    tolerance = 1e-5 if DEVICE == "cpu" else 5e-3      # the GPU multiplies fp32 on TF32 tensor cores
    assert relative_error(logprobs, reference) <= tolerance
    assert relative_error(grad_hidden, exact_hidden) <= tolerance
    assert relative_error(grad_weight, exact_weight) <= tolerance
    _, frozen = run_frozen_weight(hidden, weight, targets, upstream, temperature)
    assert torch.equal(frozen, grad_hidden)   # the sweep skips the output layer's gradient, not hidden's


def run_frozen_weight(hidden, weight, targets, upstream, temperature):
    """fused_linear_logprob with only hidden trainable: (log-probs, grad_hidden)."""
    hidden = hidden.to(DEVICE, copy=True).requires_grad_()
    logprobs = fused.fused_linear_logprob(hidden, weight.to(DEVICE), targets.to(DEVICE), temperature, sweep=SWEEP)
    logprobs.backward(upstream.to(DEVICE))
    return logprobs.detach().cpu(), hidden.grad.cpu()


@runs_triton
def test_log_probs_without_gradients_are_the_forward_sweeps():
    # The KL reference's log-probs: under no_grad, the forward alone, as the reference computes them.
    hidden, weight, targets, _ = make_case(37, 203, 32, torch.bfloat16, seed=10, ignored=[4])
    with torch.no_grad():
        logprobs = fused.fused_linear_logprob(hidden.to(DEVICE), weight.to(DEVICE), targets.to(DEVICE), 0.6,
                                              sweep=SWEEP)
    reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, 0.6)
    assert not logprobs.requires_grad and relative_error(logprobs.cpu(), reference) <= 1e-5 and logprobs[4] == 0


@runs_triton
def test_ignored_targets_give_zero_and_no_gradient():
    hidden, weight, targets, upstream = make_case(20, 50, 16, torch.float32, seed=3, ignored=[0, 7, 19])
    logprobs, grad_hidden, grad_weight = run_fused(hidden, weight, targets, upstream, 1.0)
    assert torch.all(logprobs[[0, 7, 19]] == 0) and torch.all(grad_hidden[[0, 7, 19]] == 0)
    kept = targets >= 0
    reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, 1.0)
    assert relative_error(logprobs[kept], reference[kept]) <= (1e-5 if DEVICE == "cpu" else 5e-3)   # TF32 on GPU
    # grad_weight without the ignored tokens == grad_weight of the kept tokens alone.
    _, kept_weight = exact_gradients(hidden[kept], weight, targets[kept], upstream[kept], 1.0)
    assert relative_error(grad_weight, kept_weight) <= (1e-5 if DEVICE == "cpu" else 5e-3)


def run_sweep(hidden, weight, targets, upstream, temperature, knobs=SWEEP, scale=1.0, train_weight=True):
    """linear_token_loss with loss sum(upstream * logprob), backward of scale * loss: (loss, logprobs,
    grad_hidden, grad_weight or None), the gradients those of fused_linear_logprob with scale * upstream."""
    hidden = hidden.to(DEVICE, copy=True).requires_grad_()
    weight = weight.to(DEVICE, copy=True).requires_grad_(train_weight)
    upstream = upstream.to(DEVICE)
    loss, logprobs = fused.linear_token_loss(hidden, weight, targets.to(DEVICE),
                                             lambda lp, rows: (lp * upstream[rows]).sum(), temperature, sweep=knobs)
    (scale * loss).backward()
    return loss.item(), logprobs.cpu(), hidden.grad.cpu(), None if weight.grad is None else weight.grad.cpu()


@runs_triton
def test_sweep_bf16_matches_float64_reference():
    hidden, weight, targets, upstream = make_case(37, 204, 32, torch.bfloat16, seed=6, ignored=[5])
    loss, logprobs, grad_hidden, grad_weight = run_sweep(hidden, weight, targets, upstream, 0.7, scale=0.5)
    reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, 0.7)
    assert relative_error(logprobs, reference) <= 1e-5 and logprobs[5] == 0
    assert loss == pytest.approx((reference * upstream.double()).sum().item(), rel=1e-5)
    # Both gradients are reductions summed in fp32 and rounded to bf16 once: the two-roundings floor, as for
    # the kernel above. grad_weight's sum runs over the five chunks too, in fp32, not chunk by chunk in bf16.
    ideal_hidden, ideal_weight = exact_gradients(hidden, weight, targets, 0.5 * upstream, 0.7, torch.bfloat16)
    exact_hidden, exact_weight = exact_gradients(hidden, weight, targets, 0.5 * upstream, 0.7)
    assert relative_error(grad_hidden, ideal_hidden.bfloat16()) <= 1e-3
    assert relative_error(grad_weight, ideal_weight.bfloat16()) <= 1e-3
    assert relative_error(grad_hidden, exact_hidden) <= 4e-3
    assert relative_error(grad_weight, exact_weight) <= 4e-3


@runs_triton
def test_sweep_sums_the_output_layer_gradient_over_many_chunks_in_fp32():
    # 64 chunks of one token: summed in bf16, each chunk's addition would round the whole gradient again.
    hidden, weight, targets, upstream = make_case(64, 96, 32, torch.bfloat16, seed=9)
    knobs = dataclasses.replace(SWEEP, chunk_tokens=1)
    _, _, _, grad_weight = run_sweep(hidden, weight, targets, upstream, 1.0, knobs)
    _, ideal_weight = exact_gradients(hidden, weight, targets, upstream, 1.0, torch.bfloat16)
    assert grad_weight.dtype == torch.bfloat16
    assert relative_error(grad_weight, ideal_weight.bfloat16()) <= 1e-3


@runs_triton
def test_sweep_fp32_odd_sizes_frozen_weight_and_unused_tokens():
    hidden, weight, targets, upstream = make_case(37, 203, 40, torch.float32, seed=7, ignored=[0, 36])
    upstream[8:16] = 0                      # a whole chunk whose loss has zero gradient
    loss, logprobs, grad_hidden, grad_weight = run_sweep(hidden, weight, targets, upstream, 1.3)
    reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, 1.3)
    exact_hidden, exact_weight = exact_gradients(hidden, weight, targets, upstream, 1.3)
    tolerance = 1e-5 if DEVICE == "cpu" else 5e-3      # the GPU multiplies fp32 on TF32 tensor cores
    assert relative_error(logprobs, reference) <= tolerance
    assert relative_error(grad_hidden, exact_hidden) <= tolerance
    assert relative_error(grad_weight, exact_weight) <= tolerance
    assert torch.all(grad_hidden[[0, 36]] == 0) and torch.all(grad_hidden[8:16] == 0)
    _, _, frozen_hidden, frozen_weight = run_sweep(hidden, weight, targets, upstream, 1.3, train_weight=False)
    assert frozen_weight is None and torch.equal(frozen_hidden, grad_hidden)


def test_chunked_torch_equals_reference():
    from bench.logprob_bench import chunked_linear_logprob   # the bench's token-chunked torch baseline
    hidden, weight, targets, upstream = make_case(37, 203, 32, torch.float64, seed=4, ignored=[3])
    results = []
    for fn in (fused.linear_logprob_reference, lambda *a: chunked_linear_logprob(*a, chunk_tokens=8)):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        logprobs = fn(h, w, targets, 0.9)
        logprobs.backward(upstream.double())
        results.append((logprobs, h.grad, w.grad))
    for chunked, reference in zip(results[1], results[0]):
        assert relative_error(chunked, reference) < 1e-12


def test_logprob_fn_dispatches_by_device():
    from torch._subclasses.fake_tensor import FakeTensorMode
    assert fused.logprob_fn(torch.zeros(2, 3)) is fused.linear_logprob_reference
    assert fused.logprob_fn(torch.zeros(2, 3, device="meta")) is fused.fused_linear_logprob
    with FakeTensorMode():   # bench/memory_bench.py's simulation: CPU fake tensors stand for CUDA ones
        assert fused.logprob_fn(torch.zeros(2, 3)) is fused.fused_linear_logprob


@pytest.mark.skipif(TRITON_HERE, reason="the Triton tests ran in this process")
def test_triton_tests_in_a_fresh_process():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                            cwd=Path(__file__).resolve().parent.parent, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_default_sweep_logprob_on_gpu():
    # fused_linear_logprob with the production Sweep: two token chunks, the last one short.
    temperature = 0.8
    hidden, weight, targets, upstream = make_case(1000, 5003, 256, torch.bfloat16, seed=5, ignored=[10])
    logprobs, grad_hidden, grad_weight = run_fused(hidden, weight, targets, upstream, temperature, fused.Sweep())
    reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, temperature)
    ideal_hidden, ideal_weight = exact_gradients(hidden, weight, targets, upstream, temperature, torch.bfloat16)
    assert relative_error(logprobs, reference) <= 1e-5
    assert relative_error(grad_hidden, ideal_hidden.bfloat16()) <= 1e-3
    assert relative_error(grad_weight, ideal_weight.bfloat16()) <= 1e-3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_default_sweep_on_gpu():
    # The production Sweep, with V split 4 ways (5004) and not (5003), against the float64 reference.
    for vocab in (5004, 5003):
        hidden, weight, targets, upstream = make_case(1500, vocab, 256, torch.bfloat16, seed=8, ignored=[10])
        _, logprobs, grad_hidden, grad_weight = run_sweep(hidden, weight, targets, upstream, 0.8, fused.Sweep())
        reference = fused.linear_logprob_reference(hidden.double(), weight.double(), targets, 0.8)
        ideal_hidden, _ = exact_gradients(hidden, weight, targets, upstream, 0.8, torch.bfloat16)
        _, exact_weight = exact_gradients(hidden, weight, targets, upstream, 0.8)
        assert relative_error(logprobs, reference) <= 1e-5
        assert relative_error(grad_hidden, ideal_hidden.bfloat16()) <= 1e-3
        assert relative_error(grad_weight, exact_weight) <= 6e-3


def test_row_kernels_compile_for_hopper_without_spills():
    """Ahead-of-time compile for sm_90 (no GPU needed; in a fresh process, since this one may hold
    interpreted kernels): both row kernels fit in shared memory and spill no registers, and the in-place
    one keeps its barrier. A kernel change that breaks one of these fails here, not on the GPU."""
    code = ("import json; from bench.kernel_resources import resources; "
            "print(json.dumps({n: resources(n) for n in ('row_lse', 'row_dlogits')}))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    for name, r in json.loads(result.stdout.splitlines()[-1]).items():
        if name == "row_dlogits":      # writes over its own input: warps must sync before each store
            assert r["barriers"] >= 1, r
        assert r["spill_bytes"] == 0 and r["registers"] <= 255, (name, r)
        assert r["shared_bytes"] <= 227 * 1024, (name, r)


@runs_triton
def test_logprob_bench_runs_every_row_and_its_sanity_lines():
    """bench/logprob_bench.py's own rows (the kernels as the H200 run calls them), at a tiny shape: each
    one runs (a row that raised shows as a "failed: ..." string) and the sanity lines parse, so a GPU
    run does not spend its minutes on a broken bench."""
    from bench import logprob_bench

    results, _, sanity = logprob_bench.bench_shape(64, 32, 300, 1, torch.device(DEVICE), None, True)
    for name in ("naive", "chunked", "three GEMMs", "ours", "sweep", "sweep C=256"):
        assert isinstance(results[name], tuple), (name, results[name])
    lines = sanity.splitlines()
    assert [line.split(" vs ")[0] for line in lines] == ["sanity: ours", "sanity: sweep"]
    for line in lines:   # bf16 inputs against the fp32 reference: errors of bf16 rounding, no more
        errors = [float(word.rstrip(",")) for word in line.split() if "e-" in word]
        assert len(errors) == 3 and max(errors) < 1e-2, line
