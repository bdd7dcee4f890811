"""Does the engine sample from the trainer's weights? A fixed probe, scored by both, before every step.

    probe = probe_sequences(tokenizer, setting, skills, seeds)   # once, at set-up (harness/setup.py)
    metrics.update(check(run, step))                             # spade.train, before the step's plays

The trainer pushes its weights into the engine after every update (engine.push_weights). A push that
misses a tensor, a layer left zeroed by a sleep, or a buffer the engine lost (vLLM's level-2 sleep
discards weights and buffers; a rotary table rebuilt wrong) gives an engine that samples from other
weights, and the run would train on its noise: TIS weighs such tokens down and says nothing, and
`grpo/tis_weight` is not 1 when all is well (it mixes the update's temperature with the engine's and the
nucleus mass). So every step starts by scoring a few fixed token sequences, prompts the run itself uses,
with the engine (`score`: vLLM's prompt log-probs, or HFEngine's forward) and with the trainer
(`grpo.token_logprobs`, the update's own path), both at temperature 1 with no top-k or top-p; the mean
absolute difference per token is `sync/logprob_gap`. Above `bound` the run stops in one sentence before
it plays, so nothing from that engine is trained and the last checkpoint stands.

Not here: which tensor is wrong (compare the engine's weights with the trainer's for that), a check of
the rollouts themselves (`grpo/rollout_logprob_gap` is the update's view of them, for people to watch).
"""
import random

import torch

import designer
from backend import models

PROBE_TOKENS = 32   # the tail of each probe prompt: enough tokens for a mean, a forward of under 1% of a step

# The gap above which the engine is not the trainer's, by the coarser of the two compute dtypes. Measured
# on a 2-core CPU (README, Engines): fp32 engines read 0 (HFEngine) and at most 8e-6 (vLLM's CPU build,
# SmolLM2-135M); bf16 engines beside an fp32 trainer 0.01 (tiny) and 0.05 (SmolLM2's real weights), and
# Slime's bf16 runs log 0.02-0.03 on their rollouts (its CI fails above 0.1). Every fault tried (a tensor
# not pushed after a sleep zeroed the weights, a layer pushed as zeros, a stale rotary table) reads 0.38
# to 9; vLLM's CPU build computing the logits from a tied output layer the push left stale read 1.5e-4
# after one update at lr 1e-3 (engine._pack_tied_output_layer). fp32's bound is 6x vLLM's worst healthy
# gap and 3x under that stale layer's first step. bf16 keeps 8 bits of mantissa to fp32's 24: its bound
# leaves a deeper model or MoE routing that flips under rounding 4.6x the measured 0.054, and is under
# the smallest fault's gap.
BOUNDS = {torch.float32: 5e-5, torch.bfloat16: 0.25, torch.float16: 0.25}


def probe_sequences(tokenizer, setting, skills, seeds, max_turns=3) -> list[list[int]]:
    """The probe: the last PROBE_TOKENS tokens of the designer's prompt for the run's first skill and of
    the hint writer's prompt for its first seed environment (its code), fixed for the run."""
    prompts = [setting.designer_messages(skills[0], None, "", random.Random(0), max_turns=max_turns)]
    prompts += [designer.hint_messages(seeds[0].code, setting)] if seeds else []
    return [designer.encode_chat(tokenizer, messages)[1][-PROBE_TOKENS:] for messages in prompts]


def trainer_logprobs(model, sequences) -> list[list[float]]:
    """The trainer's log-prob of each token after the first, as the update computes them
    (grpo.token_logprobs on its attention route), at temperature 1."""
    import grpo
    from compute import attention, packing
    samples = [grpo.Sample(s, [0] + [1] * (len(s) - 1), [0.0] * len(s), 0.0) for s in sequences]
    route = attention.route(model)
    with torch.no_grad(), attention.implementation(model, route):
        batch = packing.collate(samples, packed=route != "padded", device=next(model.parameters()).device)
        rows = grpo.token_logprobs(model, batch, temperature=1.0).tolist()
    if models.is_sharded(model):   # FSDP2 keeps the root whole after a forward without backward
        model.reshard()
    return [row[1:len(s)] for row, s in zip(rows, sequences)]


def logprob_gap(engine, model, sequences) -> float:
    """Mean |engine log-prob - trainer log-prob| over the probe's tokens (nats per token)."""
    ours, theirs = engine.score(sequences), trainer_logprobs(model, sequences)
    diffs = [abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y)]
    return sum(diffs) / len(diffs)


def bound(model, engine) -> float:
    """The gap a healthy engine stays under, for the coarser compute dtype of trainer and engine."""
    dtypes = {getattr(model, "compute_dtype", model.dtype), getattr(engine, "dtype", None) or model.dtype}
    return max(BOUNDS.get(d, BOUNDS[torch.bfloat16]) for d in dtypes)


def check(run, step) -> dict:
    """`sync/logprob_gap` of the engine that is about to play `step`; above `bound` the run stops here in one
    sentence (every rank: the largest gap of any rank decides)."""
    gap = logprob_gap(run.gen, run.model, run.probe)
    if run.world > 1:
        import torch.distributed as dist
        worst = torch.tensor([gap if gap == gap else float("inf")],   # NaN as inf: MAX may skip a NaN
                             device="cuda" if torch.cuda.is_available() else "cpu")
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        gap = worst.item()
    limit = bound(run.model, run.gen)
    if not gap <= limit:   # NaN too: vLLM's CPU build gives NaN for a zeroed query projection
        engine = run.gen
        while hasattr(engine, "engine"):   # launch.RankAgreement, launch.TensorParallelGroup
            engine = engine.engine
        raise SystemExit(f"spade.py: step {step}: the engine ({type(engine).__name__}) scores the fixed probe "
                         f"{gap:.4g} nats per token away from the trainer (a healthy one stays under {limit:g}), so "
                         f"it does not sample from the trainer's weights (a tensor or buffer the push missed); "
                         f"stopped before the step's plays, with the last checkpoint in {run.dir} kept")
    return {"sync/logprob_gap": gap}
