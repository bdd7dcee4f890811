"""What the update saves by skipping samples of advantage 0: grpo.update with and without the skip, in one table.

    python bench/skip_bench.py                 # SmolLM2-135M on the CPU, a demo step's batch: ~2-4 min on 2 cores
    python bench/skip_bench.py --model tiny    # the tiny model: a smoke test in seconds

A batch of --samples agent samples of --tokens tokens each (a prompt of a quarter, then the reply), as a
one-turn game's step gives them, where a share of the samples has advantage 0: every play of their
environment got the same reward (the z-scores of regret.episode_advantages are then 0). With the KL
term off those samples add nothing to the gradient, and grpo.accumulate_gradients does not run them.
The baseline is the same batch with each advantage 0 replaced by 1e-12, which runs every sample as the
update did before the skip (its gradient differs by 1e-12 of a sample's). Each cell is the median of
--iters timed updates after one warm-up, the two alternating; the ratio is the baseline's seconds over
the skip's, measured in the same run, on the same weights and optimizer.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
import grpo  # noqa: E402
from backend import models  # noqa: E402


def batch(num, tokens, vocab, zero_share, seed=0):
    """grpo.Samples of `tokens` tokens: random ids, a masked prompt of a quarter; the first
    round(num * zero_share) of them with advantage 0, the others +-1."""
    gen = torch.Generator().manual_seed(seed)
    prompt, zeros = max(1, tokens // 4), round(num * zero_share)
    return [grpo.Sample(torch.randint(vocab, (tokens,), generator=gen).tolist(), [0] * prompt + [1] * (tokens - prompt),
                        [0.0] * prompt + [-2.0] * (tokens - prompt), 0.0 if i < zeros else (-1.0) ** i)
            for i in range(num)]


def seconds(model, optimizer, batches, iters):
    """Median seconds of one grpo.update on each of `batches`, over `iters` timed rounds after one warm-up
    round; a round updates on each batch in turn, so that a change in the machine's load hits them alike."""
    times = [[] for _ in batches]
    for round_ in range(iters + 1):
        for samples, spent in zip(batches, times):
            start = time.perf_counter()
            grpo.update(model, optimizer, samples, micro_token_budget=4096)
            spent.append(time.perf_counter() - start)
    return [statistics.median(spent[1:]) for spent in times]


def measure(model, shares, *, num=32, tokens=96, iters=3):
    """Rows (share of advantage 0, baseline seconds, skip seconds, ratio) for each share."""
    optimizer = grpo.make_optimizer(model, lr=0.0)   # the weights stay as they are: each cell sees the same model
    rows = []
    for share in shares:
        skipped = batch(num, tokens, model.config.vocab_size, share)
        everything = [s if s.advantage else grpo.Sample(s.tokens, s.loss_mask, s.rollout_logprobs, 1e-12)
                      for s in skipped]
        base, skip = seconds(model, optimizer, [everything, skipped], iters)
        rows.append((share, base, skip, base / skip))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--samples", type=int, default=32, help="samples a step (a demo step: 4 x 8 plays)")
    parser.add_argument("--tokens", type=int, default=96, help="tokens a sample (a demo play: ~64 + 32)")
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = models.load_model(args.model, dtype=torch.float32, device="cpu")[0]
    rows = measure(model, (0.0, 0.5, 0.75, 1.0), num=args.samples, tokens=args.tokens, iters=args.iters)
    print(f"{args.model}: {args.samples} samples x {args.tokens} tokens, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print("| advantage 0 | baseline s | skip s | baseline / skip |\n|---|---|---|---|")
    for share, base, skip, ratio in rows:
        print(f"| {share:.0%} | {base:.2f} | {skip:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
