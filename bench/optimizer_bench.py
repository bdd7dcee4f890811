"""How far our optimizers drift from an fp32 AdamW reference over many updates at the paper's lr.

    python bench/optimizer_bench.py [--steps 100] [--lr 1e-6]    # the tiny model on the CPU, a few minutes

Officially the weights are fp32 masters with fp32 Adam moments (Megatron's distributed optimizer). Here
a model is trained in its own dtype with 8-bit AdamW (grpo.make_optimizer): bitsandbytes' for an fp32
model in one process (the CPU path), torchao's with bf16 stochastic rounding for a bf16 model (the GPU
path; the row is left out where torchao is not installed, as in .venv: `make test-vllm`'s .venv-vllm
has it), and, for contrast, bitsandbytes' on bf16 weights (round to nearest, which grpo warns about).
Every row starts from the same tiny model and takes `--steps` GRPO updates (grpo.update) on the same
fixed random samples. The table compares each row's total change of the weights, dW = W_steps - W_0
(all parameters as one vector), with the reference's: its size, its direction (cosine) and the error.
"""
import argparse
import importlib.util
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
import grpo  # noqa: E402
from infra import models  # noqa: E402

BETAS, DECAY = (0.9, 0.98), 0.1   # METHOD.md 7.2


def optimizers():
    """(name, dtype, the optimizer for a model's parameter groups): the reference first."""
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)   # as grpo.make_optimizer
    import bitsandbytes
    rows = [("fp32 weights, torch AdamW (fp32 moments): reference", torch.float32,
             lambda groups, lr: torch.optim.AdamW(groups, lr=lr, betas=BETAS)),
            ("fp32 weights, bitsandbytes AdamW8bit (CPU path)", torch.float32,
             lambda groups, lr: bitsandbytes.optim.AdamW8bit(groups, lr=lr, betas=BETAS))]
    if importlib.util.find_spec("torchao") is not None:
        from torchao.optim import AdamW8bit
        rows.append(("bf16 weights, torchao AdamW8bit, stochastic rounding (GPU path)", torch.bfloat16,
                     lambda groups, lr: AdamW8bit(groups, lr=lr, betas=BETAS, bf16_stochastic_round=True)))
    rows.append(("bf16 weights, bitsandbytes AdamW8bit, round to nearest", torch.bfloat16,
                 lambda groups, lr: bitsandbytes.optim.AdamW8bit(groups, lr=lr, betas=BETAS)))
    return rows


def samples(vocab, num=8, length=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [grpo.Sample(torch.randint(0, vocab, (length,), generator=g).tolist(), [0] * 16 + [1] * (length - 16),
                        [0.0] * 16 + [-2.0] * (length - 16), float(torch.randn(1, generator=g))) for _ in range(num)]


def change(make, dtype, steps, lr, batch):
    """W_steps - W_0 of the tiny model (as fp32, one flat vector) after `steps` updates with `make`."""
    torch.manual_seed(0)
    model = models.tiny_model(dtype=dtype)[0]
    params = [(n, p) for n, p in model.named_parameters()]
    start = torch.cat([p.detach().float().flatten() for _, p in params])
    groups = [dict(params=[p for _, p in params if p.ndim >= 2], weight_decay=DECAY),
              dict(params=[p for _, p in params if p.ndim < 2], weight_decay=0.0)]   # as grpo.make_optimizer
    optimizer = make(groups, lr)
    for _ in range(steps):
        grpo.update(model, optimizer, batch, micro_token_budget=4096, temperature=1.0, route="padded")
    return torch.cat([p.detach().float().flatten() for _, p in params]) - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-6)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    batch = samples(len(models.tiny_tokenizer()))
    rows, reference = [], None
    print(f"optimizer drift: tiny model, {args.steps} updates at lr {args.lr:g}, {len(batch)} fixed samples")
    print(f"| optimizer | size of dW / reference's | cosine(dW, reference dW) | |dW - reference dW| / |reference dW| |")
    print("|---|---|---|---|")
    for name, dtype, make in optimizers():
        delta = change(make, dtype, args.steps, args.lr, batch)
        reference = delta if reference is None else reference
        size = (delta.norm() / reference.norm()).item()
        cosine = torch.nn.functional.cosine_similarity(delta, reference, dim=0).item()
        error = ((delta - reference).norm() / reference.norm()).item()
        rows.append((name, size, cosine, error))
        print(f"| {name} | {size:.3f} | {cosine:.4f} | {error:.3f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
