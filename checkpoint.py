"""Checkpoints: what spade.py writes every --save-every steps and reads back on --resume.

A checkpoint `ckpt-NNNNN/` holds the model and tokenizer in Hugging Face format (`model/`), the
optimizer state (`optimizer-rank<r>.pt`), the loop state and the RNGs of Python and torch
(`state.pt`) and the environment memory (`env_memory.json`). It is written to a hidden directory and
renamed into place, and the `latest` pointer (with the config) is replaced atomically, so a kill never
leaves half of one; the last two are kept.

Under torchrun (FSDP2) the model weights and the Adam moments are per-rank shards. The weights are
gathered whole onto rank 0 (a collective, so every rank calls `save_checkpoint`). The optimizer
state is written by each rank as it holds it (`optimizer-rank<r>.pt`), and each rank reads its own
file back, so a resumed run needs the same number of processes. Gathering it instead fails with
torchao's 8-bit AdamW: its quantized states cannot be padded to even shards (seen; not a test). The KL
reference is never saved: `kl_reference` rebuilds it from the initial model.
"""
import dataclasses
import json
import os
import pickle
import random
import shutil
import types


def save_checkpoint(run_dir, cfg, model, tokenizer, optimizer, memory, state, rank):
    """Write ckpt-<step> and point `latest` at it. Every rank calls it; rank 0 writes."""
    import torch
    import models
    full_model = models.full_state(model)
    name = f"ckpt-{state['step']:05d}"
    tmp = run_dir / f".{name}.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    barrier()
    save_optimizer(optimizer, tmp, rank)
    barrier()
    if rank != 0:
        return
    model.save_pretrained(tmp / "model", state_dict=full_model)
    tokenizer.save_pretrained(tmp / "model")
    torch.save({"state": state, "python_rng": random.getstate(), "torch_rng": torch.get_rng_state()}, tmp / "state.pt")
    (tmp / "env_memory.json").write_text(json.dumps(memory.records if memory else []))
    shutil.rmtree(run_dir / name, ignore_errors=True)
    os.replace(tmp, run_dir / name)
    pointer = run_dir / ".latest.tmp"
    pointer.write_text(json.dumps({"checkpoint": name, "step": state["step"], "config": dataclasses.asdict(cfg)}))
    os.replace(pointer, run_dir / "latest")
    for old in sorted(run_dir.glob("ckpt-*"))[:-2]:   # keep the last two
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(run_dir):
    return run_dir / json.loads((run_dir / "latest").read_text())["checkpoint"]


def restore(checkpoint, optimizer, memory, rank):
    """Optimizer, RNGs and environment memory as they were when the checkpoint was
    saved; returns the loop state. Every rank calls it and reads its own optimizer shards."""
    import torch
    load_optimizer(optimizer, checkpoint, rank)
    saved = torch.load(checkpoint / "state.pt", weights_only=False,   # our own file, written above
                       pickle_module=EARLIER_NAMES)
    random.setstate(saved["python_rng"])
    torch.set_rng_state(saved["torch_rng"])
    if memory is not None:
        memory.records = json.loads((checkpoint / "env_memory.json").read_text())
        memory.save()
    return {"lengths": {}, **saved["state"]}


class EarlierNames(pickle.Unpickler):
    """Reads a state.pt of an earlier version, which kept the epoch's classes in designer_rewards.py."""

    def find_class(self, module, name):
        return super().find_class("regret" if module == "designer_rewards" else module, name)


EARLIER_NAMES = types.ModuleType("earlier_names")   # torch.load's pickle_module: pickle with EarlierNames
EARLIER_NAMES.Unpickler, EARLIER_NAMES.load = EarlierNames, pickle.load


def barrier():
    import torch.distributed as dist
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def save_optimizer(optimizer, directory, rank):
    """This rank's optimizer state as it holds it (under FSDP2: DTensor shards, torchao's 8-bit ones too)."""
    import torch
    torch.save(optimizer.state_dict(), directory / f"optimizer-rank{rank}.pt")


def load_optimizer(optimizer, directory, rank):
    """Read back what `save_optimizer` wrote for this rank; the process count must be the run's."""
    import torch
    import torch.distributed as dist
    world = dist.get_world_size() if dist.is_initialized() else 1
    saved = len(list(directory.glob("optimizer-rank*.pt")))
    if saved != world:
        raise SystemExit(f"spade.py: {directory} holds the optimizer shards of {saved} processes; "
                         f"resume it with {saved}, not {world}")
    optimizer.load_state_dict(torch.load(directory / f"optimizer-rank{rank}.pt", weights_only=False))


def kl_reference(cfg, model, resumed, sharded=False):
    """The frozen initial model of the KL term (METHOD 7.2), or None when kl_coef is 0. A resumed
    policy holds trained weights, so the reference is then loaded from cfg.model (the saved config
    keeps the initial name); so it is with several ranks (`sharded`), where FSDP2 modules cannot be
    copied and the reference is loaded sharded like the policy (models.load_sharded)."""
    import grpo
    import models
    if not cfg.kl_coef:
        return None
    if not resumed and not sharded:
        return grpo.frozen_copy(model)
    load = models.load_sharded if sharded else models.load_model
    return load(cfg.model)[0].eval().requires_grad_(False)   # a copy of its own
