"""grpo.py: hand-computed loss values, packed == per-sample equivalence, the model log-prob path,
one optimizer step, FSDP2 (gloo, 2 CPU processes) == one process, and a small learning run."""
import datetime
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from compute import attention
import grpo
from backend import engine, models
from backend.launch import end_rank, free_port
from compute import packing
from grpo import Sample

LOG = math.log


def losses(**overrides):
    """The docstring example of grpo_loss: two samples, three token positions each."""
    old = torch.full((2, 3), -1.0)
    args = dict(
        # sample 1: r = 1.5 at token 1, r = 1 at token 2; sample 2: r = 0.5 at token 1; token 2 of
        # sample 2 is masked and holds garbage that must not matter.
        logprobs=old + torch.tensor([[0.0, LOG(1.5), 0.0], [0.0, LOG(0.5), 50.0]]),
        old_logprobs=old,
        # pi_old / pi_rollout = 3 at sample 1's token 2 (capped to 2), 1 elsewhere, garbage where masked
        rollout_logprobs=old - torch.tensor([[0.0, 0.0, LOG(3.0)], [0.0, 0.0, -100.0]]),
        advantages=torch.tensor([1.0, -1.0]),
        mask=torch.tensor([[0, 1, 1], [0, 1, 0]]))
    args.update(overrides)
    return args


def test_grpo_loss_worked_example():
    loss, stats = grpo.grpo_loss(**losses())
    # sample 1: (-1.28 [clipped high] + -1 * 2 [TIS capped at 2]) / 2 = -1.64; sample 2: 0.8 [clipped low]
    assert loss.item() == pytest.approx((-1.64 + 0.8) / 2, abs=1e-6)
    assert stats["clip_fraction"].item() == pytest.approx(2 / 3)
    assert stats["tis_weight"].item() == pytest.approx(4 / 3)
    assert stats["tis_capped_fraction"].item() == pytest.approx(1 / 3)
    assert stats["rollout_logprob_gap"].item() == pytest.approx(LOG(3.0) / 3)   # |old - rollout|: 0, log 3, 0
    assert stats["num_loss_tokens"].item() == 3
    assert stats["kl"].item() == 0


def test_clipped_and_masked_tokens_get_no_gradient():
    args = losses()
    logprobs = args["logprobs"].clone().requires_grad_(True)
    grpo.grpo_loss(**{**args, "logprobs": logprobs})[0].backward()
    # only sample 1's token 2 is unclipped: d/dlogp of -A r w / (2 tokens) / (2 samples), r = 1, w = 2
    expected = torch.tensor([[0.0, 0.0, -0.5], [0.0, 0.0, 0.0]])
    assert torch.allclose(logprobs.grad, expected, atol=1e-6)


def test_advantage_sign_sets_gradient_direction():
    logprobs = torch.zeros(2, 2, requires_grad=True)  # ratio 1, nothing clipped, TIS weight 1
    loss, _ = grpo.grpo_loss(logprobs, logprobs.detach(), torch.zeros(2, 2), torch.tensor([2.0, -0.5]),
                             torch.tensor([[0, 1], [0, 1]]))
    loss.backward()
    # Gradient descent raises log pi where A > 0 and lowers it where A < 0.
    assert torch.allclose(logprobs.grad, torch.tensor([[0.0, -1.0], [0.0, 0.25]]))


def test_clip_bounds_are_asymmetric():
    ratios = torch.tensor([[0.7, 0.9, 1.25, 1.3]])
    loss_pos, clipped_pos = grpo.ppo_clip(ratios.log(), torch.zeros(1, 4), torch.tensor([[1.0]]))
    loss_neg, clipped_neg = grpo.ppo_clip(ratios.log(), torch.zeros(1, 4), torch.tensor([[-1.0]]))
    assert torch.allclose(loss_pos, -torch.tensor([[0.7, 0.9, 1.25, 1.28]]))
    assert clipped_pos.tolist() == [[False, False, False, True]]
    assert torch.allclose(loss_neg, torch.tensor([[0.8, 0.9, 1.25, 1.3]]))
    assert clipped_neg.tolist() == [[True, False, False, False]]


def test_tis_weight_is_truncated_and_detached():
    old = torch.tensor([LOG(0.3), LOG(0.1), LOG(0.2)], requires_grad=True)
    w = grpo.tis_weight(old, torch.tensor([LOG(0.1), LOG(0.2), LOG(0.2)]), cap=2.0)
    assert torch.allclose(w, torch.tensor([2.0, 0.5, 1.0]))
    assert not w.requires_grad


def test_k3_kl_term():
    assert grpo.k3_kl(torch.tensor(LOG(0.25)), torch.tensor(LOG(0.5))).item() == pytest.approx(0.30685, abs=1e-5)
    ref = losses()["logprobs"] + LOG(2.0)  # the reference is twice as likely everywhere
    loss0, _ = grpo.grpo_loss(**losses())
    loss, stats = grpo.grpo_loss(**losses(), kl_coef=0.1, ref_logprobs=ref)
    assert stats["kl"].item() == pytest.approx(2 - LOG(2) - 1, abs=1e-6)
    assert loss.item() == pytest.approx(loss0.item() + 0.1 * (2 - LOG(2) - 1), abs=1e-6)
    # A policy a hair from its reference (d = 1e-4, KL about d^2 / 2) keeps its small KL in float32.
    logp = torch.full((4,), -2.0)
    assert grpo.k3_kl(logp, logp + 1e-4).tolist() == pytest.approx([5.0e-9] * 4, rel=2e-2)


def test_sample_mean_and_empty_rows():
    values = torch.tensor([[1.0, 2, 3], [4, 5, 6]])
    assert grpo.sample_mean(values, torch.tensor([[0, 1, 1], [0, 0, 0]])).tolist() == [2.5, 0.0]


def test_sample_rejects_bad_shapes():
    with pytest.raises(AssertionError, match="loss_mask\\[0\\]"):
        Sample([1, 2], [1, 1], [0.0, 0.0], 1.0)
    with pytest.raises(AssertionError, match="lengths differ"):
        Sample([1, 2, 3], [0, 1], [0.0, 0.0, 0.0], 1.0)


# ---------------------------------------------------------------------------------------------------
# With a model.

def tiny_model():
    return models.load_model("tiny", device="cpu")[0]


VOCAB = 265  # the tiny model's byte-level vocabulary plus its special tokens


def random_samples(num, vocab, seed=0, min_len=4, max_len=14):
    g = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(num):
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        mask = [0] + torch.randint(0, 2, (n - 1,), generator=g).tolist()
        rollout = [-(torch.rand(1, generator=g).item() * 6) if m else 0.0 for m in mask]
        samples.append(Sample(torch.randint(0, vocab, (n,), generator=g).tolist(), mask, rollout,
                              float(torch.randn(1, generator=g))))
    return samples


def reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
                     enable_gqa=False):
    """torch.nn.attention.varlen.varlen_attn's contract on CPU: one causal SDPA per sample."""
    assert window_size == (-1, 0) and torch.equal(cu_q, cu_k), "grpo asks for causal self-attention"
    outs = []
    for start, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
        qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))
        out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=enable_gqa)
        outs.append(out.transpose(0, 1))
    return torch.cat(outs)


def reference_varlen_without_gqa(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
    """torch 2.11's varlen_attn signature: no enable_gqa, so key/value must come with every query head."""
    assert q.shape[1] == k.shape[1] == v.shape[1], "torch 2.11's varlen_attn needs as many KV heads as Q heads"
    return reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=scale, window_size=window_size)


@pytest.fixture
def cpu_varlen(monkeypatch):
    """Let the packed (torch_varlen) route run on CPU, exercising its transformers plumbing."""
    import torch.nn.attention.varlen as varlen
    monkeypatch.setattr(varlen, "varlen_attn", reference_varlen)


@pytest.mark.parametrize("route", ["padded", "torch_varlen"])
def test_token_logprobs_match_model_logits(route, cpu_varlen):
    model = tiny_model()
    samples = random_samples(5, VOCAB)
    batch = packing.collate(samples, packed=route != "padded", device="cpu")
    with torch.no_grad(), attention.implementation(model, route):
        rows = grpo.token_logprobs(model, batch, temperature=0.7)
    assert model.config._attn_implementation == "sdpa"  # restored for the in-process engine
    for b, s in enumerate(samples):
        with torch.no_grad():
            logits = model(torch.tensor([s.tokens])).logits[0].float() / 0.7
        expected = logits[:-1].log_softmax(-1).gather(-1, torch.tensor(s.tokens[1:])[:, None])[:, 0]
        assert rows[b, 0] == 0 and torch.all(rows[b, len(s.tokens):] == 0)
        torch.testing.assert_close(rows[b, 1:len(s.tokens)], expected, atol=2e-5, rtol=1e-5)


def test_packed_route_repeats_kv_heads_where_varlen_has_no_gqa(monkeypatch):
    import torch.nn.attention.varlen as varlen
    model, samples = tiny_model(), random_samples(3, VOCAB, seed=4)
    assert model.config.num_attention_heads != model.config.num_key_value_heads   # GQA: 4 query, 2 KV heads
    results = []
    for fn in (reference_varlen, reference_varlen_without_gqa):
        monkeypatch.setattr(varlen, "varlen_attn", fn)
        with torch.no_grad(), attention.implementation(model, "torch_varlen"):
            results.append(grpo.token_logprobs(model, packing.collate(samples, packed=True, device="cpu")))
    torch.testing.assert_close(results[1], results[0], atol=1e-6, rtol=1e-6)


def grads_of(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_micro_batched_and_packed_loss_equal_per_sample_loss(cpu_varlen):
    model = tiny_model()
    samples = random_samples(6, VOCAB, seed=1)
    kwargs = dict(temperature=0.8, kl_coef=0.0)
    # per sample: each alone through the model's own logits, averaged over samples
    total = 0.0
    for s in samples:
        logits = model(torch.tensor([s.tokens])).logits[0, :-1] / 0.8
        lp = F.pad(logits.log_softmax(-1).gather(-1, torch.tensor(s.tokens[1:])[:, None]).T, (1, 0))
        loss, _ = grpo.grpo_loss(lp, lp.detach(), torch.tensor([s.rollout_logprobs]),
                                 torch.tensor([s.advantage]), torch.tensor([s.loss_mask]))
        (loss / len(samples)).backward()
        total += loss.item() / len(samples)
    expected = grads_of(model)
    for route, budget in [("padded", 10_000), ("padded", 20), ("torch_varlen", 10_000), ("torch_varlen", 25)]:
        model.zero_grad(set_to_none=True)
        stats = grpo.accumulate_gradients(model, samples, micro_token_budget=budget, route=route, **kwargs)
        assert stats["loss"] == pytest.approx(total, abs=1e-5), (route, budget)
        assert (stats["num_micro_batches"] > 1) == (budget < 100)
        assert grads_of(model).keys() == expected.keys()
        for name, grad in grads_of(model).items():
            torch.testing.assert_close(grad, expected[name], atol=1e-5, rtol=1e-4, msg=f"{route} {budget} {name}")


def test_samples_of_advantage_zero_are_not_run_but_count_in_the_mean(cpu_varlen):
    # With the KL term off, a sample of advantage 0 adds nothing to the gradient: it is skipped (no
    # forward, no backward) and still counts in the sample mean, so the gradient is the full batch's.
    model = tiny_model()
    samples = random_samples(6, VOCAB, seed=7)
    samples = [dataclasses.replace(s, advantage=0.0) if i % 2 else s for i, s in enumerate(samples)]
    rows = []
    model.register_forward_hook(lambda module, args, kwargs, out: rows.append(kwargs["input_ids"].shape),
                                with_kwargs=True)
    run = sum(len(s.tokens) for s in samples if s.advantage)
    for route in ("padded", "torch_varlen"):
        model.zero_grad(set_to_none=True)
        lp = token_logprobs_per_sample(model, samples)   # the reference: every sample, one mean
        loss, _ = grpo.grpo_loss(lp, lp.detach(), *padded([s.rollout_logprobs for s in samples], float),
                                 torch.tensor([s.advantage for s in samples]), *padded([s.loss_mask for s in samples], int))
        loss.backward()
        expected = grads_of(model)
        model.zero_grad(set_to_none=True)
        rows.clear()
        stats = grpo.accumulate_gradients(model, samples, micro_token_budget=10_000, route=route)
        assert stats["num_samples"] == 6 and len(rows) == 1, (route, rows)
        assert (rows[0][0] == 3) if route == "padded" else (rows[0][1] == run), (route, rows)
        assert stats["loss"] == pytest.approx(loss.item(), abs=1e-6)
        for name, grad in grads_of(model).items():
            torch.testing.assert_close(grad, expected[name], atol=1e-6, rtol=1e-5, msg=f"{route} {name}")
    # nothing to train: one pass of weight 0, so that AdamW still steps on zero gradients, as before
    model.zero_grad(set_to_none=True)
    grpo.accumulate_gradients(model, [dataclasses.replace(s, advantage=0.0) for s in samples], route="padded")
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def padded(rows, dtype):
    width = max(map(len, rows))
    return (torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype={float: torch.float32, int: torch.long}[dtype]),)


def token_logprobs_per_sample(model, samples):
    """[B, L] log-probs, each sample through the model alone, 0 at position 0 and past its end."""
    width = max(len(s.tokens) for s in samples)
    rows = []
    for s in samples:
        logits = model(input_ids=torch.tensor([s.tokens])).logits[0, :-1].float()
        lp = logits.log_softmax(-1).gather(-1, torch.tensor(s.tokens[1:])[:, None])[:, 0]
        rows.append(F.pad(lp, (1, width - len(s.tokens))))
    return torch.stack(rows)


def test_the_update_scores_at_the_training_temperature_and_weighs_by_the_rollouts(cpu_varlen):
    # METHOD 7.2, as officially: the engine samples at 0.6 and reports those log-probs; the update's
    # forward divides the logits by the training temperature, 1.0 (Slime's --rollout-temperature). The TIS
    # weight is then min(pi_T1 / pi_T0.6, 2), detached, and the gradient is -A * w * grad log pi_T1.
    model = tiny_model()
    [sample] = random_samples(1, VOCAB, seed=3, min_len=12, max_len=12)
    tokens = torch.tensor([sample.tokens])
    with torch.no_grad():
        logits = model(input_ids=tokens).logits[0, :-1].float()
    targets, mask = tokens[0, 1:], torch.tensor(sample.loss_mask[1:], dtype=torch.bool)
    at = lambda t: torch.log_softmax(logits / t, -1).gather(-1, targets[:, None])[:, 0]
    rollout = [0.0] + torch.where(mask, at(0.6), torch.zeros(())).tolist()
    sample = dataclasses.replace(sample, rollout_logprobs=rollout, advantage=1.5)
    model.zero_grad(set_to_none=True)
    stats = grpo.accumulate_gradients(model, [sample], temperature=1.0, route="padded")
    weights = torch.exp(at(1.0) - at(0.6)).clamp(max=2.0)[mask]
    assert stats["tis_weight"] == pytest.approx(weights.mean().item(), rel=1e-5)
    assert stats["tis_capped_fraction"] == pytest.approx((weights == 2.0).float().mean().item())
    assert stats["rollout_logprob_gap"] == pytest.approx((at(1.0) - at(0.6))[mask].abs().mean().item(), rel=1e-5)
    assert not torch.allclose(weights, torch.ones_like(weights), atol=0.05)     # the two temperatures differ
    reference = tiny_model()
    logp = torch.log_softmax(reference(input_ids=tokens).logits[0, :-1].float(), -1).gather(-1, targets[:, None])[:, 0]
    (-(1.5 * weights * torch.exp(logp[mask] - logp[mask].detach())).mean()).backward()
    for name, grad in grads_of(model).items():
        torch.testing.assert_close(grad, dict(reference.named_parameters())[name].grad, atol=1e-6, rtol=1e-4, msg=name)


def test_a_sample_of_weight_w_counts_as_w_copies(cpu_varlen):
    # Thinking episodes (METHOD.md 4.2) become one sample per turn, weighted by its share of the
    # episode's tokens, so that the episode counts once in the batch mean: weight 2 must equal the
    # sample twice, and weights 1/2 on two samples one full sample's worth of the mean.
    model = tiny_model()
    a, b, c = random_samples(3, VOCAB, seed=5)
    kwargs = dict(temperature=0.8, micro_token_budget=20)
    for route in ("padded", "torch_varlen"):
        results = []
        for batch in ([dataclasses.replace(a, weight=2.0), b, c], [a, a, b, c],
                      [a, dataclasses.replace(b, weight=.5), dataclasses.replace(c, weight=.5)]):
            model.zero_grad(set_to_none=True)
            results.append((grpo.accumulate_gradients(model, batch, route=route, **kwargs), grads_of(model)))
        (weighted, weighted_grads), (copies, copies_grads), (halves, _) = results
        assert weighted["num_micro_batches"] > 1
        assert weighted["loss"] == pytest.approx(copies["loss"], abs=1e-6)
        assert weighted["pg_loss"] == pytest.approx(copies["pg_loss"], abs=1e-6)
        for name, grad in weighted_grads.items():
            torch.testing.assert_close(grad, copies_grads[name], atol=1e-6, rtol=1e-5, msg=f"{route} {name}")
        per_sample = [grpo.accumulate_gradients(model, [s], route=route, **kwargs)["loss"] for s in (a, b, c)]
        assert halves["loss"] == pytest.approx((per_sample[0] + (per_sample[1] + per_sample[2]) / 2) / 2, abs=1e-6)
    with pytest.raises(AssertionError, match="weight"):
        dataclasses.replace(a, weight=0.0)


@pytest.mark.parametrize("route", ["padded", "torch_varlen"])
def test_fused_loss_equals_logprobs_then_loss(route, cpu_varlen):
    # The CUDA default (grpo.fused_grpo_loss: loss and gradients formed in fused.linear_token_loss's
    # sweep) against token_logprobs + grpo_loss, KL and micro-batches included; on the GPU when there
    # is one (Triton compiled), else on the CPU (interpreted).
    torch.manual_seed(0)   # the reference's noise: the same case whatever ran before
    model = tiny_model().to("cuda" if torch.cuda.is_available() else "cpu")
    reference = grpo.frozen_copy(model)
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(0.05 * torch.randn_like(param))
    samples = [dataclasses.replace(s, weight=w) for s, w in zip(random_samples(5, VOCAB, seed=2), [1, .5, .5, 1, 2])]
    kwargs = dict(temperature=0.8, kl_coef=0.1, ref_model=reference, route=route, micro_token_budget=30)
    results = []
    for fused in (False, True):
        model.zero_grad(set_to_none=True)
        results.append((grpo.accumulate_gradients(model, samples, fused_loss=fused, **kwargs), grads_of(model)))
    (plain, plain_grads), (fused, fused_grads) = results
    assert plain["num_micro_batches"] > 1 and plain["kl"] > 1e-3
    for key in ("loss", "pg_loss", "kl", "clip_fraction", "tis_weight", "tis_capped_fraction", "num_loss_tokens",
                "rollout_logprob_gap"):
        assert fused[key] == pytest.approx(plain[key], rel=1e-6, abs=1e-6), key   # float32 sums, other order
    assert fused_grads.keys() == plain_grads.keys()
    for name, grad in fused_grads.items():
        torch.testing.assert_close(grad, plain_grads[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_a_micro_batch_reads_nothing_back_to_the_host(kl_coef, monkeypatch):
    # What stalls a GPU between micro-batches, checked on the CPU: an op that reads a value back to the host
    # (.item(), int(), bool(), the nonzero() behind boolean indexing). The CUDA path: a packed row, the
    # fused loss, and the reference's log-probs for the KL term. (Padded rows are the CPU's: transformers
    # reads their mask back to choose a kernel.)
    import torch.nn.attention.varlen as varlen
    from torch.utils._python_dispatch import TorchDispatchMode

    class ReadBacks(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen, self.paused = [], False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not self.paused and func.overloadpacket in (torch.ops.aten._local_scalar_dense, torch.ops.aten.nonzero,
                                                           torch.ops.aten.is_nonzero, torch.ops.aten.item):
                self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    mode = ReadBacks()

    def kernel_double(*args, **kwargs):   # the CUDA kernel's CPU stand-in reads the sample bounds: not counted
        mode.paused = True
        try:
            return reference_varlen(*args, **kwargs)
        finally:
            mode.paused = False

    monkeypatch.setattr(varlen, "varlen_attn", kernel_double)
    model = tiny_model()
    batch = packing.collate(random_samples(3, VOCAB, seed=4), packed=True, device="cpu")
    with mode, attention.implementation(model, "torch_varlen"):
        loss, stats = grpo._micro_batch_loss(model, batch, 1.0, (0.2, 0.28, 2.0, kl_coef), model, fused_loss=True)
        loss.backward()
    assert mode.seen == [] and loss.requires_grad and stats["num_loss_tokens"].ndim == 0


def test_one_step_changes_every_parameter():
    model = tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = grpo.make_optimizer(model, lr=1e-3)
    assert type(optimizer) is torch.optim.AdamW   # fp32 moments, as officially (METHOD.md 7.2)
    stats = grpo.update(model, optimizer, random_samples(4, VOCAB), micro_token_budget=24,
                        activation_checkpointing=True)
    for name, param in model.named_parameters():
        assert not torch.equal(param, before[name]), f"{name} did not move"
    for key in ("loss", "pg_loss", "kl", "clip_fraction", "tis_weight", "grad_norm", "seconds"):
        assert math.isfinite(stats[key]), key
    assert stats["clip_fraction"] == 0  # one step per batch: pi_old is the current policy
    assert stats["num_samples"] == 4 and stats["num_tokens"] > stats["num_loss_tokens"] > 0


def test_update_bench_runs_its_three_paths(capsys):
    """bench/update_bench.py on the tiny model (its --quick run): naive, ours and ours-lp each update,
    and the table and ratio lines print, so a GPU run does not spend its minutes on a broken bench."""
    import argparse
    from bench import update_bench

    args = argparse.Namespace(tokens=256, min_len=16, max_len=64, micro_token_budget=128, iters=1)
    rows = update_bench.bench_model("tiny", args, "cpu", cuda=False)
    assert [r[1] for r in rows] == ["naive", "ours", "ours-lp"]
    assert all(r[2] > 0 and r[3] > 0 and r[6] >= 2 for r in rows), rows   # seconds, tokens/s, micro-batches
    update_bench.print_table(rows)
    out = capsys.readouterr().out
    assert "tiny ours: /naive tokens/s" in out and "tiny ours-lp: /naive tokens/s" in out and "no ratio" not in out


def test_skip_bench_runs_at_a_tiny_size():
    """bench/skip_bench.py on the tiny model: a row per share, each with both timings and their ratio (the
    times themselves are too noisy at this size to compare in a test)."""
    from bench import skip_bench

    rows = skip_bench.measure(tiny_model(), (0.0, 1.0), num=8, tokens=24, iters=1)
    assert [r[0] for r in rows] == [0.0, 1.0] and all(r[1] > 0 and r[2] > 0 and r[3] > 0 for r in rows), rows


def test_kl_to_a_frozen_reference():
    model = tiny_model()
    reference = grpo.frozen_copy(model)
    assert not any(p.requires_grad for p in reference.parameters())
    samples = random_samples(3, VOCAB)
    same = grpo.accumulate_gradients(model, samples, kl_coef=0.1, ref_model=reference)
    assert same["kl"] == pytest.approx(0, abs=1e-7) and same["loss"] == pytest.approx(same["pg_loss"], abs=1e-7)
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(0.05 * torch.randn_like(param))
    moved = grpo.accumulate_gradients(model, samples, kl_coef=0.1, ref_model=reference)
    assert moved["kl"] > 1e-3 and moved["loss"] > moved["pg_loss"]


def test_push_weights_into_an_engine_with_its_own_copy():
    import copy
    from backend import engine
    model, tokenizer = models.load_model("tiny", device="cpu")
    separate = engine.make_engine(copy.deepcopy(model), tokenizer, kind="hf")
    shared = engine.make_engine(model, tokenizer, kind="hf")
    grpo.update(model, torch.optim.SGD(model.parameters(), lr=1.0), random_samples(3, VOCAB))
    engine.push_weights(model, shared)  # the same object: nothing to copy
    assert shared.model is model
    engine.push_weights(model, separate)
    for (name, param), (_, pushed) in zip(model.named_parameters(), separate.model.named_parameters()):
        assert torch.equal(param, pushed), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="varlen attention and the fused kernel need CUDA")
def test_cuda_packed_routes_match_padded():
    model = models.load_model("tiny", dtype=torch.bfloat16, device="cuda")[0]
    samples = random_samples(6, VOCAB, seed=3, max_len=300)
    routes = ["torch_varlen"] + (["flash"] if attention.route(model) == "flash" else [])
    with torch.no_grad():
        padded = grpo.token_logprobs(model, packing.collate(samples, packed=False, device="cuda"))
        for route in routes:
            with attention.implementation(model, route):
                packed = grpo.token_logprobs(model, packing.collate(samples, packed=True, device="cuda"))
            difference = (packed.float() - padded.float()).abs()  # bf16 noise; a mask bug gives ~1
            assert difference.max() < 0.15 and difference.mean() < 0.02, (route, difference.max())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_update_runs_packed():
    model = models.load_model("tiny", dtype=torch.bfloat16, device="cuda")[0]
    stats = grpo.update(model, grpo.make_optimizer(model, lr=1e-3), random_samples(8, VOCAB, max_len=200),
                        micro_token_budget=512, activation_checkpointing=True)
    assert stats["attention"] in ("flash", "torch_varlen") and stats["num_micro_batches"] > 1
    assert all(math.isfinite(stats[k]) for k in ("loss", "grad_norm", "tis_weight"))


# ---------------------------------------------------------------------------------------------------
# FSDP2 on two CPU processes (gloo) against one process.

def fsdp_samples():
    return random_samples(7, VOCAB, seed=2)


def fsdp_update(model, fused_loss=False):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)  # SGD: the update is exactly -lr * grad
    stats = grpo.update(model, optimizer, fsdp_samples(), micro_token_budget=16, max_grad_norm=0.05,
                        fused_loss=fused_loss)
    return stats, {name: tensor.clone() for name, tensor in engine.full_named_parameters(model)}


def fsdp_worker(rank, world_size, port, path, run=fsdp_update, timeout_s=120, compute_dtype=None):
    """One gloo rank: run(the sharded tiny model); rank 0 saves what it returns to path."""
    import torch.distributed as dist
    torch.set_num_threads(1)  # a spawned process: tests/conftest.py did not run here
    dist.init_process_group("gloo", rank=rank, world_size=world_size, init_method=f"tcp://127.0.0.1:{port}",
                            timeout=datetime.timedelta(seconds=timeout_s))  # a rank mismatch fails, not hangs
    try:
        result = run(models.shard_model(tiny_model(), compute_dtype))
        if rank == 0:
            torch.save(result, path)
    except BaseException:
        dist.destroy_process_group()
        raise
    end_rank()   # as a run's ranks end: past a barrier, the group destroyed, then os._exit


@pytest.mark.parametrize("fused_loss", [False, True], ids=["logprobs-then-loss", "fused-loss"])
def test_fsdp2_two_processes_match_one(tmp_path, fused_loss):
    # fused-loss: the CUDA default, whose gradients of the gathered lm_head come from fused.py's sweep
    # (its Triton row kernels interpreted here; the workers inherit TRITON_INTERPRET from conftest.py).
    import functools
    import torch.multiprocessing as mp
    if fused_loss and torch.cuda.is_available():
        pytest.skip("CPU ranks run Triton only interpreted, which conftest.py turns on only without CUDA")
    # The ranks must get different micro-batch counts, so the weight-0 catch-up pass is exercised.
    counts = {len(packing.plan_micro_batches([len(s.tokens) for s in packing.samples_for_rank(fsdp_samples(), r, 2)],
                                          16, padded=True)) for r in (0, 1)}
    assert len(counts) == 2
    run = functools.partial(fsdp_update, fused_loss=fused_loss)
    mp.spawn(fsdp_worker, args=(2, free_port(), str(tmp_path / "fsdp.pt"), run), nprocs=2)
    sharded_stats, sharded = torch.load(tmp_path / "fsdp.pt")
    stats, single = fsdp_update(tiny_model(), fused_loss)
    assert stats["grad_norm"] > 0.05  # the clip was active, so it was tested too
    for key in ("loss", "grad_norm", "num_tokens", "num_loss_tokens", "tis_weight"):
        assert sharded_stats[key] == pytest.approx(stats[key], rel=1e-5, abs=1e-7), key
    assert sharded.keys() == single.keys()
    for name in single:
        torch.testing.assert_close(sharded[name], single[name], atol=1e-6, rtol=1e-5, msg=name)


def hybrid_update(model):
    """fsdp_update on a hybrid-sharded model, with its mesh's shape and each parameter's placements."""
    placements = {tuple(str(p) for p in param.placements) for param in model.parameters()}
    return (*fsdp_update(model), tuple(model.model.embed_tokens.weight.device_mesh.shape), placements)


def test_hybrid_sharding_on_two_nodes_of_two_matches_one_process(tmp_path, monkeypatch):
    """4 ranks as torchrun numbers 2 nodes of 2 (LOCAL_WORLD_SIZE=2): a node holds one sharded copy, the
    nodes replicate it, and the update (gradient clipping included) is one process's."""
    import torch.multiprocessing as mp
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")   # the spawned ranks inherit it
    mp.spawn(fsdp_worker, args=(4, free_port(), str(tmp_path / "hybrid.pt"), hybrid_update), nprocs=4)
    sharded_stats, sharded, shape, placements = torch.load(tmp_path / "hybrid.pt")
    assert shape == (2, 2) and placements == {("R", "S(0)")}   # Replicate() over nodes, Shard(0) within
    stats, single = fsdp_update(tiny_model())
    for key in ("loss", "grad_norm", "num_tokens", "num_loss_tokens"):
        assert sharded_stats[key] == pytest.approx(stats[key], rel=1e-5, abs=1e-7), key
    for name in single:
        torch.testing.assert_close(sharded[name], single[name], atol=1e-6, rtol=1e-5, msg=name)


def numerics(model):
    """What a GPU run's update does to the numbers: the dtypes it computes, reduces and steps in."""
    computed = []
    model.model.layers[0].register_forward_hook(lambda module, args, out: computed.append(out.dtype))
    # One micro-batch a rank: gradients reduce-scattered in bf16 would all be bf16 numbers; in fp32, few are.
    grpo.accumulate_gradients(model, fsdp_samples(), micro_token_budget=1024, route="padded")
    grads = [p.grad.to_local() for p in model.parameters()]
    wide = sum(int((g != g.bfloat16().float()).sum()) for g in grads) / sum(g.numel() for g in grads)
    optimizer = grpo.make_optimizer(model, lr=1e-6)
    optimizer.step()
    return dict(params={p.dtype for p in model.parameters()}, grads={g.dtype for g in grads}, computed=set(computed),
                wide=wide, optimizer=type(optimizer).__name__,
                moments={v.dtype for state in optimizer.state.values() for k, v in state.items() if k != "step"})


def test_fsdp2_keeps_fp32_master_weights_computes_in_bf16_and_reduces_in_fp32(tmp_path):
    # The official numerics (METHOD.md 7.2), as models.shard_model sets them for a GPU run, on two gloo ranks.
    import functools
    import torch.multiprocessing as mp
    worker = functools.partial(fsdp_worker, run=numerics, compute_dtype=torch.bfloat16)
    mp.spawn(worker, args=(2, free_port(), str(tmp_path / "numerics.pt")), nprocs=2)
    out = torch.load(tmp_path / "numerics.pt")
    assert out["params"] == out["grads"] == out["moments"] == {torch.float32} and out["computed"] == {torch.bfloat16}
    assert out["optimizer"] == "AdamW" and out["wide"] > 0.5


# ---------------------------------------------------------------------------------------------------
# Learning: a trivial environment family with a scripted check.

ALLOWED = torch.arange(VOCAB) % 5 == 0  # the "right answers": a random policy picks one about 20% of the time


def expected_reward(model, prompts):
    """Exact expected reward of the policy (probability that the first reply token is allowed)."""
    with torch.no_grad():
        probs = model(torch.tensor(prompts)).logits[:, -1].float().softmax(-1)
    return probs[:, ALLOWED].sum(-1).mean().item()


def test_grpo_learns_a_trivial_environment_family():
    """Each environment is a random prompt; the scripted check gives reward 1 when the reply's first
    token is one of the allowed ids. Rollouts come from the in-process engine, as in spade.py."""
    from backend import engine
    model, tokenizer = models.load_model("tiny", device="cpu")
    hf_engine = engine.make_engine(model, tokenizer, kind="hf")
    g = torch.Generator().manual_seed(0)
    held_out = torch.randint(0, VOCAB, (32, 6), generator=g).tolist()
    start = expected_reward(model, held_out)
    assert start <= 0.3
    optimizer = grpo.make_optimizer(model, lr=1e-2)
    for step in range(30):
        prompts = torch.randint(0, VOCAB, (8, 6), generator=g).tolist()  # 8 environments x 8 plays
        completions = hf_engine.generate([p for p in prompts for _ in range(8)],
                                         engine.SamplingParams(max_new_tokens=1, seed=step))
        rewards = torch.tensor([float(ALLOWED[c.token_ids[0]]) for c in completions]).view(8, 8)
        # per-environment z-score (METHOD.md 6.1); a group with equal rewards gives no gradient
        std = rewards.std(-1, unbiased=False, keepdim=True)
        advantages = torch.where(std > 0, (rewards - rewards.mean(-1, keepdim=True)) / std.clamp(min=1e-6), 0.0)
        samples = [Sample(prompts[i // 8] + c.token_ids, [0] * 6 + [1], [0.0] * 6 + c.logprobs,
                          float(advantages.view(-1)[i])) for i, c in enumerate(completions)]
        hf_engine.sleep()
        grpo.update(model, optimizer, samples, micro_token_budget=512)
        engine.push_weights(model, hf_engine)  # shares the model: wakes it, copies nothing
        if expected_reward(model, held_out) >= 0.8:
            break
    print(f"expected reward {start:.2f} -> {expected_reward(model, held_out):.2f} in {step + 1} steps")
    assert expected_reward(model, held_out) >= 0.8


def test_optimizer_bench_runs_at_a_tiny_size(capsys):
    """bench/optimizer_bench.py for two updates: the reference row is itself, every other row is compared."""
    from bench import optimizer_bench
    rows = optimizer_bench.main(["--steps", "2"])
    assert rows[0][1:4] == (1.0, pytest.approx(1.0), 0.0) and len(rows) >= 4
    assert all(size > 0 and -1 <= cosine <= 1 for _, size, cosine, _, _ in rows)
    assert rows[1][0].startswith("GPU default") and rows[1][2] > 0.9   # two steps: the sign of the gradient
    assert "| bf16 weights, bitsandbytes AdamW8bit, round to nearest |" in capsys.readouterr().out
