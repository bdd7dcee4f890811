"""The policy update: PPO-clip + truncated importance sampling on one rollout batch (METHOD.md 7).

No group normalisation here: every sample arrives with its advantage, which regret.py computes (the
agent's z-scores within each environment, the designer's rewards centred per skill and scaled). One
call of `update` is one optimizer step on the whole batch of designer and agent samples, as in the
paper (global batch = rollout batch). Top to bottom: `Sample`; the loss as small pure functions;
log-probs from the final hidden states of a micro-batch (packing.py: one packed row with
variable-length attention on CUDA, attention.py, or length-sorted padded rows with SDPA elsewhere)
through fused.py (no [tokens x vocabulary] logits on CUDA; there the loss and its gradients are
formed in one sweep, `fused_grpo_loss`); `make_optimizer` (AdamW: METHOD.md 7.2) and `update` (FSDP2's sharding is
models.shard_model; the weight push into the engine is engine.push_weights). Tests: tests/test_grpo.py.

Deliberately not here: several optimizer steps per rollout (so the "old" policy is always the current
weights, see `accumulate_gradients`), value functions, entropy bonus, sequence-level (GSPO) ratios,
tensor/sequence parallelism.
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import math
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist

from backend import models
from compute import attention, packing


@dataclass
class Sample:
    """One training sequence: a whole agent episode, one turn of a thinking episode, or one designer
    response (METHOD.md 7.1, 4.2).

    loss_mask[i] is 1 only on tokens the policy generated (prompts, observations and tool outputs are 0);
    rollout_logprobs[i] is the engine's generation-time log-prob of tokens[i] (0.0 where the mask is 0);
    the advantage is one scalar, broadcast over the sample's mask-1 tokens. weight is the sample's share
    in the batch mean: 1, or for each turn sample of a thinking episode its share of the episode's trained
    tokens, so that the episode counts once, as the token mean over all its turns.
    """
    tokens: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    advantage: float
    weight: float = 1.0

    def __post_init__(self):
        n = len(self.tokens)
        assert n >= 2, f"a sample needs a prompt and a reply, got {n} tokens"
        assert len(self.loss_mask) == n == len(self.rollout_logprobs), (
            f"tokens/loss_mask/rollout_logprobs lengths differ: {n}, {len(self.loss_mask)}, "
            f"{len(self.rollout_logprobs)}")
        # Token 0 has no hidden state before it; in a packed row its prediction would come from the
        # previous sample's last token.
        assert self.loss_mask[0] == 0, "loss_mask[0] must be 0: the first token is never predicted"
        assert set(self.loss_mask) <= {0, 1}, "loss_mask holds 0 and 1 only"
        assert math.isfinite(self.advantage), f"advantage is {self.advantage}"
        assert 0 < self.weight < math.inf, f"weight is {self.weight}"


def agent_samples(episodes, advantages, compact_filter=False):
    """The agent's samples (METHOD 7.1): every episode with generated tokens, with its advantage. A
    thinking episode gives one sample per turn, each with the whole advantage and the share of the
    episode's trained tokens its turn holds as its weight: the episode counts once, as the token mean
    over all its turns (METHOD 4.2). The compact filter (tool use, METHOD 4.3) leaves truncated episodes
    out of training, after the z-scores: they still count in their environment's mean and std."""
    samples = []
    for e, a in zip(episodes, advantages):
        if not (compact_filter and e.status == "truncated"):
            sequences = e.sequences()
            tokens = sum(sum(mask) for _, mask, _ in sequences)
            samples += [Sample(*sequence, a, weight=sum(sequence[1]) / tokens) for sequence in sequences]
    return samples


def num_trained_episodes(episodes):
    """N_agent of the role scale (METHOD 6.2 step 4): the episodes with tokens to train on, counted as the
    loss counts them: a thinking episode once, not once per turn; truncated ones that the compact filter
    leaves out count too."""
    return sum(bool(e.sequences()) for e in episodes)


# ---------------------------------------------------------------------------------------------------
# The loss: plain tensors in, numbers out. Shapes: B samples (rows), L tokens, advantages [B].

def ppo_clip(logprobs, old_logprobs, advantages, clip_low=0.2, clip_high=0.28):
    """Per-token PPO-clip loss max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), r = exp(logp - logp_old).

    Returns (loss [B, L], clipped [B, L] bool: the clipped branch is the active one, so no gradient).
    Example with clip 0.2 / 0.28: A=+1, r=1.5 -> max(-1.5, -1.28) = -1.28, clipped (the step already went
    far enough); A=+1, r=0.5 -> -0.5, not clipped; A=-1, r=0.5 -> max(0.5, 0.8) = 0.8, clipped;
    A=-1, r=1.5 -> 1.5, not clipped. The high side is wider (0.28) so rare tokens can rise faster.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def tis_weight(old_logprobs, rollout_logprobs, cap=2.0):
    """Truncated importance-sampling weight min(pi_old / pi_rollout, cap), detached (METHOD.md 7.2).

    Corrects for the samples coming from another engine (vLLM numerics) and, for designer samples, from
    weights R updates old. Example: old = log 0.3, rollout = log 0.1 -> 3 -> capped to 2.0;
    old = log 0.1, rollout = log 0.2 -> 0.5. Its mean is not 1 even with identical numerics: pi_old is the
    full softmax at the training temperature (1.0; 0.7 for tool use with Qwen3-4B) while the engine samples
    at its own (0.6) and reports log-probs after top-k/top-p (vLLM's "processed_logprobs"), so a sampled
    token is likelier under the engine than under pi_old and the logged mean tis_weight sits below 1.
    """
    return torch.exp(old_logprobs - rollout_logprobs).clamp(max=cap).detach()


def k3_kl(logprobs, ref_logprobs):
    """Schulman's low-variance k3 estimate of KL(pi || pi_ref) per token: exp(d) - d - 1, d = ref - logp,
    capped at 10 as Slime's `low_var_kl` is (a token far from the reference then gives no gradient).
    Computed as expm1(d) - d: the same value, without losing a small d's KL to rounding near 1.

    Never negative, 0 where the policies agree. Example: logp = log 0.25, ref = log 0.5 -> d = log 2 ->
    2 - 0.6931 - 1 = 0.3069; d = 20 -> 10.
    """
    d = ref_logprobs - logprobs
    return (torch.expm1(d) - d).clamp(max=10.0)


def sample_mean(values, mask):
    """Mean of each row over its mask-1 tokens, [B, L] -> [B]; a row without mask-1 tokens gives 0.

    Example: values [[1, 2, 3], [4, 5, 6]], mask [[0, 1, 1], [0, 0, 0]] -> [2.5, 0.0].
    """
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def token_terms(logprobs, old_logprobs, rollout_logprobs, advantages, clip_low, clip_high, tis_cap, kl_coef,
                ref_logprobs):
    """Per token, elementwise: (ppo_clip * tis_weight, k3_kl or zeros, clipped, tis weight); the loss of
    a token is the first plus kl_coef times the second (the KL term is not importance weighted)."""
    pg, clipped = ppo_clip(logprobs, old_logprobs, advantages, clip_low, clip_high)
    weight = tis_weight(old_logprobs, rollout_logprobs, tis_cap)
    kl = torch.zeros_like(pg)
    if kl_coef != 0:
        assert ref_logprobs is not None, "kl_coef != 0 needs ref_logprobs from the frozen reference model"
        kl = k3_kl(logprobs, ref_logprobs)
    return pg * weight, kl, clipped, weight


def grpo_loss(logprobs, old_logprobs, rollout_logprobs, advantages, mask, clip_low=0.2, clip_high=0.28,
              tis_cap=2.0, kl_coef=0.0, ref_logprobs=None, weights=None):
    """The policy loss of METHOD.md 7.2 on B samples: ([B, L] x4 + advantages [B] + ...) -> (loss, stats).

    Per token: ppo_clip(...) * tis_weight(old, rollout) + kl_coef * k3_kl(logp, ref) (the KL term is not
    importance weighted, as in Slime). Averaging is SAMPLE-level, deliberately: each sample's tokens are
    averaged over its own mask-1 tokens, then the B sample means are averaged. That is what the official
    code gets from Slime (per-sample token mean, summed, divided by the global batch size), and it
    makes every sample (a short designer reply or a 16k-token episode) weigh the same, which is what the
    role-balancing scale S of METHOD.md 6.2 assumes. A sample with an all-zero mask counts as 0 in the
    mean (Slime's inert padding samples). weights [B] (default all 1) make the mean a weighted one,
    sum(w * sample mean) / sum(w): a thinking episode's turn samples weigh their shares of its tokens (METHOD.md 4.2).

    Example (clip 0.2 / 0.28, cap 2): sample 1, A=+1, two tokens with r = 1.5 (-1.28, clipped) and r = 1
    with pi_old / pi_rollout = 3 (w = 2: -2.0) -> mean -1.64; sample 2, A=-1, one token with r = 0.5 (0.8,
    clipped) -> 0.8. loss = (-1.64 + 0.8) / 2 = -0.42; clip_fraction 2/3, tis_weight (1 + 2 + 1) / 3.

    stats (detached 0-d tensors; fractions and means over the mask-1 tokens): pg_loss, kl,
    clip_fraction, tis_weight, tis_capped_fraction, num_loss_tokens, rollout_logprob_gap (|old - rollout|).
    """
    mask = mask.to(logprobs.dtype)
    per_token, kl, clipped, weight = token_terms(logprobs, old_logprobs, rollout_logprobs, advantages[:, None],
                                                 clip_low, clip_high, tis_cap, kl_coef, ref_logprobs)
    weights = torch.ones_like(advantages) if weights is None else weights
    batch_mean = lambda per_sample: (per_sample * weights).sum() / weights.sum()
    loss = batch_mean(sample_mean(per_token + kl_coef * kl, mask))
    num_tokens = mask.sum()

    def token_mean(x):
        return (x.detach().to(mask.dtype) * mask).sum() / num_tokens.clamp(min=1)

    capped = (old_logprobs - rollout_logprobs) > math.log(tis_cap)
    stats = dict(pg_loss=batch_mean(sample_mean(per_token, mask)).detach(), kl=token_mean(kl),
                 clip_fraction=token_mean(clipped), tis_weight=token_mean(weight),
                 tis_capped_fraction=token_mean(capped), num_loss_tokens=num_tokens.detach(),
                 rollout_logprob_gap=token_mean((old_logprobs - rollout_logprobs).abs()))   # Slime's abs_diff
    return loss, stats


# ---------------------------------------------------------------------------------------------------
# Log-probs and the loss of a micro-batch (packing.py builds the micro-batches).

def _final_hidden(model, batch: packing.MicroBatch):
    """(final hidden states [F, H] of every position that predicts a next token, those tokens [F], the
    output projection [V, H]); F = rows x (S - 1).

    The whole model is called (not model.model) so that FSDP2's root hooks gather the final norm and
    lm_head; an empty logits_to_keep stops it from computing the [T, V] logits: fused.py scores the
    targets from the hidden states.
    """
    no_logits = torch.empty(0, dtype=torch.long, device=batch.input_ids.device)
    # A packed row has no mask: its kernels read the sample bounds (cu_seq_lens). Given as transformers'
    # ready mask mapping, so that it does not look for packed samples itself (a read back to the host);
    # Qwen3-MoE's forward takes no mapping and looks (one read back a forward).
    layers = set(getattr(model.config, "layer_types", None) or ["full_attention"])
    dense = not hasattr(model.config, "num_experts")
    mask = dict.fromkeys(layers) if batch.packed and dense else batch.attention_mask
    out = model(input_ids=batch.input_ids, attention_mask=mask,
                position_ids=batch.position_ids, use_cache=False, output_hidden_states=True,
                logits_to_keep=no_logits, **batch.varlen)
    hidden = out.hidden_states[-1]  # [R, S, H], after the final norm
    return (hidden[:, :-1].reshape(-1, hidden.shape[-1]), batch.input_ids[:, 1:].reshape(-1),
            model.get_output_embeddings().weight)


def token_logprobs(model, batch: packing.MicroBatch, temperature=1.0):
    """Log-prob of every sample token under `model`: [B, L] rows, 0 at position 0 and on padding.

    Through fused.py: its Triton sweep on CUDA (a chunk of tokens' logits at a time, never the [T, V]
    logits), its fp32 torch reference elsewhere. The logits are divided by `temperature`, which the
    update passes as the training temperature (`spade.Unflagged.train_temperature`, 1.0), not the rollout's: the TIS weight
    then compares these log-probs with the engine's at the sampling temperature, as officially (METHOD.md 7.2).
    """
    from compute import fused  # lazily: Triton is only needed on CUDA
    hidden, targets, weight = _final_hidden(model, batch)
    return packing.per_sample(fused.logprob_fn(hidden)(hidden, weight, targets, temperature), batch)


def fused_grpo_loss(model, batch: packing.MicroBatch, temperature=1.0, clip_low=0.2, clip_high=0.28, tis_cap=2.0,
                    kl_coef=0.0, ref_logprobs=None):
    """`grpo_loss` of the micro-batch with the current weights as pi_old, through fused.linear_token_loss:
    the loss is a sum of per-token terms, so its gradient is formed during the forward sweep over the
    vocabulary (three GEMMs, not four). Returns (loss, stats) as grpo_loss does, with the same values."""
    from compute import fused  # lazily, as in token_logprobs: Triton is only needed on CUDA
    hidden, targets, weight = _final_hidden(model, batch)
    # Which predicting position scores each (sample, token): its flat index + 1 through packing.per_sample, 0 =
    # none, sent to a spare slot F. A scatter, not boolean indexing: nothing is read back to the host.
    F = targets.numel()
    index = torch.arange(1, F + 1, device=targets.device, dtype=torch.float64)
    where = packing.per_sample(index, batch).long() - 1
    where = where.masked_fill(where < 0, F).flatten()
    mask = batch.loss_mask
    shares = batch.weights / batch.weights.sum()                                  # sample-level averaging
    weights = mask / mask.sum(-1, keepdim=True).clamp(min=1) * shares[:, None]

    def flat(values):  # [B, L] -> [F], 0 at positions that score no sample token
        out = torch.zeros(F + 1, device=targets.device, dtype=torch.float32)
        return out.scatter_(0, where, values.float().flatten())[:F]

    coef, rollout = flat(weights), flat(batch.rollout_logprobs)
    advantages, ref = flat(batch.advantages[:, None].expand_as(mask)), flat(ref_logprobs) if kl_coef else None

    def token_loss(logprobs, rows):
        per_token, kl, _, _ = token_terms(logprobs, logprobs.detach(), rollout[rows], advantages[rows], clip_low,
                                          clip_high, tis_cap, kl_coef, None if ref is None else ref[rows])
        return ((per_token + kl_coef * kl) * coef[rows]).sum()

    loss, flat_logprobs = fused.linear_token_loss(hidden, weight, targets, token_loss, temperature)
    logprobs = packing.per_sample(flat_logprobs, batch)
    return loss, grpo_loss(logprobs, logprobs, batch.rollout_logprobs, batch.advantages, mask, clip_low, clip_high,
                           tis_cap, kl_coef, ref_logprobs, batch.weights)[1]   # its stats


# ---------------------------------------------------------------------------------------------------
# Optimizer, the update, FSDP2 and the weight push.

def make_optimizer(model, lr=1e-6, betas=(0.9, 0.98), weight_decay=0.1, moments="fp32"):
    """AdamW with METHOD.md 7.2's defaults on the fp32 (master) weights; no weight decay on biases and
    norm scales (1-D). `moments`: "fp32" (torch's AdamW, as officially: every CPU run, and GPU runs where
    the memory plan finds room) or "8bit" (torchao's AdamW8bit, which takes FSDP2's DTensors; where it
    does not: harness/plan.py).
    """
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [dict(params=[p for _, p in params if p.ndim >= 2], weight_decay=weight_decay),
              dict(params=[p for _, p in params if p.ndim < 2], weight_decay=0.0)]
    assert all(p.dtype == torch.float32 for _, p in params), "the optimizer steps fp32 master weights"
    assert moments in ("fp32", "8bit"), f"moments are fp32 or 8bit, not {moments!r}"
    if moments == "fp32":
        # One parameter at a time: the foreach kernels would hold temporaries the size of all the moments.
        return torch.optim.AdamW(groups, lr=lr, betas=betas, foreach=False)
    if importlib.util.find_spec("torchao") is None:
        raise SystemExit("spade.py: 8-bit AdamW moments (what fits this GPU memory) need torchao "
                         "(requirements-gpu.txt)")
    from torchao.optim import AdamW8bit
    return AdamW8bit(groups, lr=lr, betas=betas)


def frozen_copy(model):
    """The KL reference (a frozen copy of the initial policy) of one process. Build it only when
    kl_coef != 0: it costs a model's memory. (Several ranks load it sharded: checkpoint.kl_reference.)"""
    return copy.deepcopy(model).eval().requires_grad_(False)


def accumulate_gradients(model, samples: list[Sample], *, micro_token_budget=16384, temperature=1.0,
                         clip_low=0.2, clip_high=0.28, tis_cap=2.0, kl_coef=0.0, ref_model=None,
                         route: str | None = None, fused_loss: bool | None = None) -> dict:
    """Backward the GRPO loss of the whole batch, micro-batch by micro-batch; returns summed stats.

    The gradients equal those of `grpo_loss` over all samples at once: each micro-batch's sample mean is
    weighted by its share of the samples' weights. pi_old is the current weights, detached (ratio 1, gradient
    of log pi), as Slime does: for the agent's episodes the policy that played them (one optimizer step per
    rollout), while a designer sample was written R updates earlier and only the TIS weight against its
    rollout log-probs corrects for that, as officially; the clip bites only when a forker takes several steps
    per batch. Every rank passes the same full batch and trains on its share (`samples_for_rank`). fused_loss
    (default: on CUDA) computes the loss through `fused_grpo_loss`, else log-probs first, then `grpo_loss`. A
    sample of advantage 0 (KL off) adds 0 to the gradient: it is not run, only counted in the mean.
    """
    assert samples, "update needs at least one sample"
    assert kl_coef == 0 or ref_model is not None, "kl_coef != 0 needs ref_model (see frozen_copy)"
    vocab = model.get_output_embeddings().weight.shape[0]   # checked here, on the host: fused.py cannot
    assert max(max(s.tokens) for s in samples) < vocab, f"a sample holds a token id outside the vocabulary ({vocab})"
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    route = route or attention.route(model)
    device = next(model.parameters()).device
    fused_loss = device.type == "cuda" if fused_loss is None else fused_loss
    total_weight = sum(s.weight for s in samples)
    trained = [s for s in samples if s.advantage != 0 or kl_coef != 0]
    plan, num_passes = _plan(trained, micro_token_budget, route == "padded", device, rank, world)
    totals = defaultdict(float)
    with contextlib.ExitStack() as stack:
        stack.callback(model.train, model.training)
        model.train()  # activation checkpointing only runs in training mode
        stack.enter_context(attention.implementation(model, route))
        if kl_coef != 0:
            stack.enter_context(attention.implementation(ref_model, route))
        for step in range(num_passes):
            group, weight = (plan[step], 1.0) if step < len(plan) else ([samples[0]], 0.0)
            batch = packing.collate(group, packed=route != "padded", device=device)
            loss, stats = _micro_batch_loss(model, batch, temperature, (clip_low, clip_high, tis_cap, kl_coef),
                                            ref_model, fused_loss)
            share = weight * sum(s.weight for s in group) / total_weight
            # FSDP2 averages gradients over ranks; the shares already sum to 1 over all ranks.
            (loss * share * world).backward()
            # Stats stay on the device until the end: a .item() per micro-batch would sync the GPU.
            tokens = stats.pop("num_loss_tokens") * weight
            totals["loss"] += loss.detach() * share
            totals["pg_loss"] += stats.pop("pg_loss") * share
            for key, value in stats.items():  # token means -> token sums, divided after the reduce
                totals[key] += value * tokens
            totals["num_loss_tokens"] += tokens
            totals["num_tokens"] += sum(batch.lengths) * weight
    return _reduced(totals, device, world) | dict(num_samples=len(samples), num_micro_batches=num_passes,
                                                  attention=route)


def _plan(samples, micro_token_budget, padded, device, rank, world):
    """This rank's share of the samples in micro-batches, and how many passes every rank runs (at least one:
    AdamW steps on zero gradients), FSDP2 gathering collectively: a rank run out repeats one at weight 0."""
    local = packing.samples_for_rank(samples, rank, world)
    plan = [[local[i] for i in group] for group in
            packing.plan_micro_batches([len(s.tokens) for s in local], micro_token_budget, padded)]
    num_passes = torch.tensor(len(plan), device=device)
    if world > 1:
        dist.all_reduce(num_passes, op=dist.ReduceOp.MAX)
    return plan, max(int(num_passes), 1)


def _micro_batch_loss(model, batch, temperature, clips, ref_model, fused_loss):
    """One micro-batch's (loss, stats): through the fused loss, or log-probs first, then grpo_loss."""
    ref_logprobs = None
    if clips[3] != 0:   # kl_coef
        with torch.no_grad():
            ref_logprobs = token_logprobs(ref_model, batch, temperature)
        if models.is_sharded(ref_model):   # FSDP2 keeps a root whole until its backward, which a frozen model lacks
            ref_model.reshard()
    if fused_loss:
        return fused_grpo_loss(model, batch, temperature, *clips, ref_logprobs)
    logprobs = token_logprobs(model, batch, temperature)
    return grpo_loss(logprobs, logprobs.detach(), batch.rollout_logprobs, batch.advantages, batch.loss_mask,
                     *clips, ref_logprobs, batch.weights)


def _reduced(totals, device, world):
    """The micro-batches' summed stats, summed over ranks; token sums back to token means."""
    keys = sorted(totals)
    summed = torch.stack([torch.as_tensor(totals[k], device=device).double() for k in keys])
    if world > 1:
        dist.all_reduce(summed)
    out = dict(zip(keys, summed.tolist()))
    for key in ("kl", "clip_fraction", "tis_weight", "tis_capped_fraction", "rollout_logprob_gap"):
        out[key] /= max(out["num_loss_tokens"], 1.0)
    return out


def update(model, optimizer, samples: list[Sample], *, micro_token_budget=16384, max_grad_norm=1.0,
           activation_checkpointing=False, **loss_kwargs) -> dict:
    """One optimizer step on one rollout batch; returns the stats for the log line.

    loss_kwargs go to `accumulate_gradients` (temperature, clip_low/high, tis_cap, kl_coef, ref_model,
    route: an attention.route name, by default the best one for the model; fused_loss). Stats: loss, pg_loss, kl,
    clip_fraction, tis_weight, tis_capped_fraction, rollout_logprob_gap, grad_norm (before clipping), num_tokens,
    num_loss_tokens, num_samples, num_micro_batches, seconds, and attention (the route that ran:
    "flash", "torch_varlen" or "padded").
    """
    start = time.perf_counter()
    if activation_checkpointing and not model.is_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer.zero_grad(set_to_none=True)
    stats = accumulate_gradients(model, samples, micro_token_budget=micro_token_budget, **loss_kwargs)
    grad_norm = float(clip_gradients([p for p in model.parameters() if p.requires_grad], max_grad_norm))
    # A NaN step would silently poison every weight: stop here instead.
    assert math.isfinite(grad_norm), f"gradient norm is {grad_norm}; the step was not taken"
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stats.update(grad_norm=grad_norm, seconds=time.perf_counter() - start)
    return stats


def clip_gradients(params, max_norm: float) -> torch.Tensor:
    """Scale the gradients so that their global L2 norm is at most max_norm; returns the norm before.

    Under FSDP2 each rank holds a shard of every gradient: the squares of its shards are summed, the sums
    all-reduced over the ranks of one copy (hybrid sharding: the mesh's last dimension; the other holds
    copies), and each rank scales its own shards, as torch's clip_grad_norm_ does with DTensors, here on
    the local shards, so that no step of it depends on how DTensor dispatches a foreach op.
    """
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params if p.grad is not None]
    squares = torch.stack(torch._foreach_norm(grads)).float().square().sum()
    sharded = [p.grad for p in params if p.grad is not None and hasattr(p.grad, "to_local")]
    if sharded:
        mesh = sharded[0].device_mesh
        dist.all_reduce(squares, group=mesh.get_group(mesh.ndim - 1))
    norm = squares.sqrt()
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm
