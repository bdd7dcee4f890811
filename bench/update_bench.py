"""One full policy update (forward, backward, optimizer step), grpo.update against the naive way, in one table.

    python bench/update_bench.py            # on a CUDA GPU (written for an H200): Qwen3-4B and a cut
                                            # Qwen3-30B-A3B shape, random weights, 16k tokens, ~2-3 min
    python bench/update_bench.py --quick    # the tiny model on the CPU, a few hundred tokens: smoke test

Both paths train the same randomly initialised model (models.py's `random-<shape>[:layers]`), held as
a GPU run holds it (fp32 master weights sharded by FSDP2 in a group of one, bf16 compute; fp32 on the
CPU), and step it with the run's optimizer (grpo.make_optimizer, fp32 moments on the GPU), on the same
random samples (random lengths adding up to --tokens, the first quarter of each a masked prompt),
with the same GRPO loss (grpo.grpo_loss), micro-batch token budget, gradient clipping and activation
checkpointing; they differ in everything the update path is about:
  naive  length-sorted padded rows with SDPA; log-probs from the model's full logits, cast to fp32,
         log_softmax and gather
  ours   grpo.update: one packed row with variable-length attention, the loss and its gradients from
         the final hidden states in one sweep (grpo.fused_grpo_loss, never the [T x V] logits),
         and its gradient clipping on local shards
  ours-lp the same with fused_loss=False: log-probs first (fused.fused_linear_logprob), then the loss
Each path builds its optimizer, takes one untimed warm-up update (Triton autotuning, optimizer states),
then --iters timed updates (median). Peak: torch.cuda.max_memory_allocated() over the timed updates,
weights, gradients and optimizer states included. Tokens/s counts real tokens, not padding. MFU is
6 * N * T / seconds / 989e12 (H200 dense bf16 peak), N = the parameters minus the input embedding table
(the output projection's matmul is real work, tied or not), with MoE experts counted at
num_experts_per_tok / num_experts (active parameters); attention's own flops are not counted.
Target: ours >= 1.2x the naive tokens/s at <= 0.8x its peak memory.
"""
import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from compute import attention  # noqa: E402
from backend import models  # noqa: E402
import grpo  # noqa: E402
from compute import packing  # noqa: E402

H200_BF16_FLOPS = 989e12
GIB = 2 ** 30


def random_samples(num_tokens, min_len, max_len, vocab, seed=0):
    """grpo.Samples of random lengths in [min_len, max_len] adding up to num_tokens (the last one takes
    the remainder, at least 2): random ids, the first quarter masked as prompt, advantages +-1."""
    gen = torch.Generator().manual_seed(seed)
    samples, left = [], num_tokens
    while left > 0:
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
        n = left if left - n < min_len else n
        prompt = max(1, n // 4)
        samples.append(grpo.Sample(tokens=torch.randint(vocab, (n,), generator=gen).tolist(),
                                   loss_mask=[0] * prompt + [1] * (n - prompt),
                                   rollout_logprobs=[0.0] * prompt + [-12.0] * (n - prompt),  # ~ log(1/V)
                                   advantage=float(torch.randint(2, (1,), generator=gen)) * 2 - 1))
        left -= n
    return samples


def naive_update(model, optimizer, samples, micro_token_budget, max_grad_norm=1.0):
    """The textbook update: padded micro-batches, fp32 log_softmax over the full logits, same loss."""
    optimizer.zero_grad(set_to_none=True)
    model.train()
    device = next(model.parameters()).device
    plan = packing.plan_micro_batches([len(s.tokens) for s in samples], micro_token_budget, padded=True)
    for group in plan:
        batch = packing.collate([samples[i] for i in group], packed=False, device=device)
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids, use_cache=False).logits.float()
        picked = logits[:, :-1].log_softmax(-1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
        logprobs = F.pad(picked, (1, 0)) * batch.attention_mask
        loss, _ = grpo.grpo_loss(logprobs, logprobs.detach(), batch.rollout_logprobs, batch.advantages,
                                 batch.loss_mask)
        (loss * len(group) / len(samples)).backward()
        del logits, picked, logprobs, loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return len(plan)


def active_parameters(model) -> int:
    """Parameters doing matmul work per token: all but the input embedding table; MoE experts scaled by
    the fraction of experts each token visits."""
    config, embedding = model.config, model.get_input_embeddings().weight
    total = 0
    for name, param in model.named_parameters():  # a tied output projection is listed once, as the table
        count = param.numel()
        if "experts" in name:
            count = count * config.num_experts_per_tok // config.num_experts
        total += count
    tied = model.get_output_embeddings().weight is embedding
    return total - (0 if tied else embedding.numel())


def measure(step, iters, cuda):
    """(median seconds, peak GiB or None, step's return value) over iters timed calls after one warm-up."""
    step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        result = step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), (torch.cuda.max_memory_allocated() / GIB if cuda else None), result


def bench_model(name, args, device, cuda):
    """Rows (model, path, seconds, tokens/s, MFU, peak GiB, micro-batches) for one model, naive first."""
    model, _ = models.load_model(name, dtype=torch.float32, device=device)
    note = ""
    if getattr(model.config, "num_experts", None):
        try:
            model.set_experts_implementation("grouped_mm")
        except (AttributeError, ValueError, ImportError) as err:  # older transformers, or no grouped_mm kernel
            note = f" (grouped_mm unavailable: {str(err).splitlines()[0]})"
        note = f"experts={model.config._experts_implementation}{note}"
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cuda:   # as a GPU run: fp32 masters, bf16 compute, fp32 reduction (main's group of one)
        models.shard_model(model, torch.bfloat16)
    samples = random_samples(args.tokens, args.min_len, args.max_len, model.config.vocab_size)
    num_tokens, n_active = sum(len(s.tokens) for s in samples), active_parameters(model)
    print(f"{name}: N = {n_active / 1e6:,.1f}M active non-embedding parameters, {len(samples)} samples, "
          f"{num_tokens} tokens, ours' attention route {attention.route(model)} {note}", flush=True)
    paths = {"naive": (lambda: grpo.make_optimizer(model),
                       lambda opt: naive_update(model, opt, samples, args.micro_token_budget)),
             "ours": (lambda: grpo.make_optimizer(model),
                      lambda opt: grpo.update(model, opt, samples, micro_token_budget=args.micro_token_budget,
                                              activation_checkpointing=True)["num_micro_batches"]),
             "ours-lp": (lambda: grpo.make_optimizer(model),
                         lambda opt: grpo.update(model, opt, samples, micro_token_budget=args.micro_token_budget,
                                                 activation_checkpointing=True, fused_loss=False)["num_micro_batches"])}
    rows = []
    for path, (make_opt, run) in paths.items():
        optimizer = None
        try:
            optimizer = make_opt()
            seconds, peak, micro = measure(lambda: run(optimizer), args.iters, cuda)
            mfu = 6 * n_active * num_tokens / seconds / H200_BF16_FLOPS if cuda else None
            rows.append((name, path, seconds, num_tokens / seconds, mfu, peak, micro))
        except Exception as err:      # out of memory or a failing path: the other paths still run
            print(f"{name} {path}: {type(err).__name__} ({(str(err).splitlines() or [''])[0][:120]})", flush=True)
            rows.append((name, path, None, None, None, None, None))
        print_row(*rows[-1])
        del optimizer
        model.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    del model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rows


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_row(name, path, seconds, tps, mfu, peak, micro):
    print(f"{name:<26} {path:<7} {fmt(seconds, '.3f'):>9} {fmt(tps, ',.0f'):>9} {fmt(mfu, '.1%'):>6} "
          f"{fmt(peak, '.1f'):>9} {fmt(micro, 'd'):>6}", flush=True)


def print_table(rows):
    print(f"\n{'model':<26} {'path':<7} {'s/update':>9} {'tok/s':>9} {'MFU':>6} {'peak GiB':>9} {'micro':>6}")
    for row in rows:
        print_row(*row)
    print()
    for name in dict.fromkeys(r[0] for r in rows):
        naive = next(r for r in rows if r[0] == name and r[1] == "naive")
        for ours in (r for r in rows if r[0] == name and r[1] != "naive"):
            if naive[3] is None or ours[3] is None:
                print(f"{name} {ours[1]}: no ratio (a path failed)")
                continue
            speed = ours[3] / naive[3]
            memory = ours[5] / naive[5] if naive[5] else None
            met = "" if memory is None else ("  target met" if speed >= 1.2 and memory <= 0.8 else "  target MISSED")
            print(f"{name} {ours[1]}: /naive tokens/s {speed:.2f}x, peak memory {fmt(memory, '.2f')}x "
                  f"(target >= 1.2x at <= 0.8x){met}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny model on the CPU, a few hundred tokens")
    parser.add_argument("--models", nargs="+", help="default: random-qwen3-4b random-qwen3-30b-a3b:<--moe-layers>")
    parser.add_argument("--moe-layers", type=int, default=8, help="layers of the cut Qwen3-30B-A3B shape")
    parser.add_argument("--tokens", type=int, help="tokens per update (default 16384; --quick 384)")
    parser.add_argument("--micro-token-budget", type=int, default=16384)
    parser.add_argument("--iters", type=int, default=2, help="timed updates per path (median reported)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.quick
    if not cuda and not args.quick:
        print("update_bench: no CUDA GPU; nothing measured (use --quick for the CPU smoke test)")
        return
    args.tokens = args.tokens or (384 if args.quick else 16384)
    args.min_len, args.max_len = (16, 96) if args.quick else (512, 3072)
    models = args.models or (["tiny"] if args.quick else ["random-qwen3-4b", f"random-qwen3-30b-a3b:{args.moe_layers}"])
    if cuda:
        import torch.distributed as dist
        from backend.launch import free_port
        dist.init_process_group("nccl", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{free_port()}")
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    print("rows as measured (the whole table again at the end):", flush=True)
    for name in models:
        rows += bench_model(name, args, "cuda" if cuda else "cpu", cuda)
    print_table(rows)


if __name__ == "__main__":
    main()
