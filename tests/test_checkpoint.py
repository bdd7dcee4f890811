"""checkpoint.py under FSDP2: each rank saves its optimizer shards and gets exactly them back.
(The single-process save/resume path runs end to end in test_spade.py.)"""
import functools

import pytest
import torch
import torch.distributed as dist

import checkpoint
import grpo
import models
from launch import free_port
from test_grpo import fsdp_samples, fsdp_worker, tiny_model


def local(tensor):
    """A rank's own shard as a plain tensor (torchao's 8-bit states are dequantized)."""
    tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return tensor.dequantize() if hasattr(tensor, "dequantize") else tensor


def optimizer_round_trip(directory, model):
    """One step, save as a checkpoint does, load into a fresh sharded model and optimizer; returns the
    largest difference of any rank's optimizer state (inf for a shard of another shape) and its size."""
    rank = dist.get_rank()
    optimizer = grpo.make_optimizer(model, lr=1e-3)
    grpo.update(model, optimizer, fsdp_samples(), micro_token_budget=16)
    checkpoint.save_optimizer(optimizer, directory, rank)
    dist.barrier()
    fresh = models.shard_model(tiny_model())
    fresh_optimizer = grpo.make_optimizer(fresh, lr=1e-3)
    checkpoint.load_optimizer(fresh_optimizer, directory, rank)
    worst = 0.0
    for before, after in zip(optimizer.state.values(), fresh_optimizer.state.values()):
        for key, value in before.items():
            a, b = local(value), local(after[key])
            worst = max(worst, float((a - b).abs().max()) if a.shape == b.shape else float("inf"))
    grpo.update(fresh, fresh_optimizer, fsdp_samples(), micro_token_budget=16)   # and it steps on
    worst = torch.tensor([worst, len(optimizer.state)], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)                     # rank 0 returns every rank's worst
    return worst.tolist()


def test_sharded_optimizer_state_resumes_on_every_rank(tmp_path):
    import torch.multiprocessing as mp
    run = functools.partial(optimizer_round_trip, tmp_path)
    mp.spawn(fsdp_worker, args=(2, free_port(), str(tmp_path / "result.pt"), run), nprocs=2)
    worst, num_states = torch.load(tmp_path / "result.pt")
    assert num_states > 0 and worst == 0.0


@pytest.mark.slow
def test_sharded_torchao_optimizer_state_resumes_on_every_rank(tmp_path, monkeypatch):
    """The same with torchao's 8-bit AdamW, the optimizer FSDP2 runs use (make test-vllm installs it).
    Compiles torchao's step per parameter shape first: a long collective timeout, and AOT autograd's
    cache off as spade.py sets it under torchrun."""
    pytest.importorskip("torchao.optim")
    import torch.multiprocessing as mp
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))   # the workers inherit both
    monkeypatch.setenv("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    run = functools.partial(optimizer_round_trip, tmp_path)
    mp.spawn(fsdp_worker, args=(2, free_port(), str(tmp_path / "result.pt"), run, 600), nprocs=2)
    worst, num_states = torch.load(tmp_path / "result.pt")
    assert num_states > 0 and worst == 0.0


def test_a_state_saved_before_the_reward_modules_merged_still_loads(tmp_path, monkeypatch):
    # Runs saved when the epoch's classes lived in designer_rewards.py resume: restore finds them in regret.
    import random
    import sys
    import regret
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    checkpoint.save_optimizer(optimizer, tmp_path, 0)
    with monkeypatch.context() as old:
        old.setitem(sys.modules, "designer_rewards", regret)
        old.setattr(regret.Epoch, "__module__", "designer_rewards")
        torch.save({"state": {"step": 3, "epoch": regret.Epoch(0, [], {})}, "python_rng": random.getstate(),
                    "torch_rng": torch.get_rng_state()}, tmp_path / "state.pt")
    monkeypatch.delitem(sys.modules, "designer_rewards", raising=False)
    state = checkpoint.restore(tmp_path, optimizer, None, 0)
    assert isinstance(state["epoch"], regret.Epoch) and state["step"] == 3 and state["lengths"] == {}
    assert "designer_rewards" not in sys.modules                     # no module was faked for it
