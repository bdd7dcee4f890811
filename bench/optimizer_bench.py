"""How far our optimizers drift from an fp32 AdamW reference over many updates at the paper's lr.

    python bench/optimizer_bench.py [--steps 100] [--lr 1e-6]    # the tiny model on the CPU, a few minutes

Officially the weights are fp32 masters with fp32 Adam moments (Megatron's distributed optimizer) and
bf16 compute. The "GPU default" row is what a GPU run does, built by the functions the run calls: the
model sharded by models.shard_model (fp32 master weights, bf16 compute, fp32 gradient reduction; here
over a gloo group of one) and stepped by grpo.make_optimizer (torch's AdamW, fp32 moments). Where
torchao is installed, the same with 8-bit moments (what the plan takes where fp32 ones do not fit). The
other rows: bitsandbytes' 8-bit AdamW on the fp32 model, and, for contrast, two
memory savers that keep bf16 weights: torchao's 8-bit AdamW with stochastic rounding (left out where
torchao is not installed, as in .venv; `make test-vllm`'s .venv-vllm has it) and bitsandbytes' with
round to nearest. Every row starts from the same tiny model and takes `--steps` GRPO updates
(grpo.update) on the same fixed random samples. The table compares each row's total change of the
weights, dW = W_steps - W_0 (all parameters as one vector, fp32), with the reference's: its size, its
direction (cosine) and the error.
"""
import argparse
import importlib.util
import logging
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
import grpo  # noqa: E402
from backend import engine, models  # noqa: E402
from backend.launch import free_port  # noqa: E402

BETAS, DECAY = (0.9, 0.98), 0.1   # METHOD.md 7.2


def plain(dtype, make):
    """A tiny model in `dtype` and its optimizer `make(groups, lr)`, parameter groups as grpo.make_optimizer's."""
    def build(lr):
        model = models.tiny_model(dtype=dtype)[0]
        groups = [dict(params=[p for p in model.parameters() if p.ndim >= 2], weight_decay=DECAY),
                  dict(params=[p for p in model.parameters() if p.ndim < 2], weight_decay=0.0)]
        return model, make(groups, lr)
    return build


def gpu_run(moments):
    """The tiny model as a GPU run holds it: FSDP2 with fp32 masters and bf16 compute, and the optimizer
    of the run's memory plan (`moments`: harness/plan.py)."""
    def build(lr):
        model = models.shard_model(models.tiny_model(dtype=torch.float32)[0], torch.bfloat16)
        return model, grpo.make_optimizer(model, lr=lr, betas=BETAS, weight_decay=DECAY, moments=moments)
    return build


def optimizers():
    """(name, build(lr) -> (model, optimizer)): the reference first."""
    # bitsandbytes logs a failure to load an optional CPU kernel that its optimizers do not need
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    import bitsandbytes
    rows = [("fp32 weights, torch AdamW (fp32 moments): reference",
             plain(torch.float32, lambda groups, lr: torch.optim.AdamW(groups, lr=lr, betas=BETAS))),
            ("GPU default: fp32 master weights (FSDP2), bf16 compute, fp32 gradients and moments", gpu_run("fp32")),
            ("fp32 weights, bitsandbytes AdamW8bit",
             plain(torch.float32, lambda groups, lr: bitsandbytes.optim.AdamW8bit(groups, lr=lr, betas=BETAS)))]
    if importlib.util.find_spec("torchao") is not None:
        from torchao.optim import AdamW8bit
        rows.append(("GPU where the plan needs 8-bit moments: as the default, torchao AdamW8bit", gpu_run("8bit")))
        rows.append(("bf16 weights, torchao AdamW8bit, stochastic rounding (a memory saver)", plain(
            torch.bfloat16, lambda groups, lr: AdamW8bit(groups, lr=lr, betas=BETAS, bf16_stochastic_round=True))))
    rows.append(("bf16 weights, bitsandbytes AdamW8bit, round to nearest", plain(
        torch.bfloat16, lambda groups, lr: bitsandbytes.optim.AdamW8bit(groups, lr=lr, betas=BETAS))))
    return rows


def samples(vocab, num=8, length=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [grpo.Sample(torch.randint(0, vocab, (length,), generator=g).tolist(), [0] * 16 + [1] * (length - 16),
                        [0.0] * 16 + [-2.0] * (length - 16), float(torch.randn(1, generator=g))) for _ in range(num)]


def change(build, steps, lr, batch):
    """W_steps - W_0 of the tiny model (as fp32, one flat vector) after `steps` updates."""
    torch.manual_seed(0)
    model, optimizer = build(lr)
    weights = lambda: torch.cat([w.float().flatten() for _, w in engine.full_named_parameters(model)])
    start = weights()
    for _ in range(steps):
        grpo.update(model, optimizer, batch, micro_token_budget=4096, temperature=1.0, route="padded")
    return weights() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-6)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    batch = samples(len(models.tiny_tokenizer()))
    rows = []
    print(f"optimizer drift: tiny model, {args.steps} updates at lr {args.lr:g}, {len(batch)} fixed samples")
    print("| optimizer | size of dW / reference's | cosine(dW, reference dW) | |dW - reference dW| / |reference dW| |")
    print("|---|---|---|---|")
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{free_port()}")
    try:
        for name, build in optimizers():
            rows.append(row(name, change(build, args.steps, args.lr, batch), rows))
    finally:
        dist.destroy_process_group()
    return rows


def row(name, delta, rows):
    """(name, size, cosine, error, dW) against the first row's change (the reference), printed."""
    reference = rows[0][4] if rows else delta
    size = (delta.norm() / reference.norm()).item()
    cosine = torch.nn.functional.cosine_similarity(delta, reference, dim=0).item()
    error = ((delta - reference).norm() / reference.norm()).item()
    print(f"| {name} | {size:.3f} | {cosine:.4f} | {error:.3f} |", flush=True)
    return name, size, cosine, error, delta


if __name__ == "__main__":
    main()
