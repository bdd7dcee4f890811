"""checkpoint.py: under FSDP2 each rank saves its optimizer shards and gets exactly them back, also on
another number of processes; the run directory is one run's, and what cannot be read or written is one
sentence. (The single-process
save/resume path runs end to end in test_spade.py.)"""
import fcntl
import functools
import resource
import shutil
import signal

import pytest
import torch
import torch.distributed as dist

from harness import checkpoint
import grpo
from backend import models
from backend.launch import free_port
from test_grpo import fsdp_samples, fsdp_worker, tiny_model


def local(tensor):
    """A rank's own shard as a plain tensor (torchao's 8-bit states are dequantized)."""
    tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return tensor.dequantize() if hasattr(tensor, "dequantize") else tensor


def optimizer_round_trip(directory, model, moments="fp32"):
    """One step with `moments` (grpo.make_optimizer), save as a checkpoint does, load into a fresh sharded model and optimizer; returns the
    largest difference of any rank's optimizer state (inf for a shard of another shape) and its size."""
    rank = dist.get_rank()
    optimizer = grpo.make_optimizer(model, lr=1e-3, moments=moments)
    grpo.update(model, optimizer, fsdp_samples(), micro_token_budget=16)
    checkpoint.save_optimizer(optimizer, model, directory, rank)
    dist.barrier()
    fresh = models.shard_model(tiny_model())
    fresh_optimizer = grpo.make_optimizer(fresh, lr=1e-3, moments=moments)
    checkpoint.load_optimizer(fresh_optimizer, fresh, directory, rank)
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


def full_moments(model, optimizer):
    """Every optimizer state by parameter name, whole: what a resume must give back on any number of processes."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
    state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    return {(name, key): torch.as_tensor(value).clone() for name, states in state["state"].items()
            for key, value in states.items()}


def saved_by(directory, model):
    """One update, then the optimizer saved as a checkpoint saves it; its moments, whole."""
    optimizer = grpo.make_optimizer(model, lr=1e-3)
    grpo.update(model, optimizer, fsdp_samples(), micro_token_budget=16)
    checkpoint.save_optimizer(optimizer, model, directory, dist.get_rank() if dist.is_initialized() else 0)
    return full_moments(model, optimizer)


def resumed_by(directory, model):
    """A fresh optimizer loaded from `directory`: its moments, whole; then it trains on."""
    optimizer = grpo.make_optimizer(model, lr=1e-3)
    checkpoint.load_optimizer(optimizer, model, directory, dist.get_rank() if dist.is_initialized() else 0)
    moments = full_moments(model, optimizer)
    stats = grpo.update(model, optimizer, fsdp_samples(), micro_token_budget=16)
    assert stats["grad_norm"] > 0
    return moments


def same(got, expected):
    return got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in expected)


def test_fp32_optimizer_state_reshards_to_another_number_of_processes(tmp_path):
    """Saved by 2 FSDP2 ranks, read back by one plain process and by 4 ranks; saved by one process, read back
    by 2: every moment as it was (torch.distributed.checkpoint, by parameter name)."""
    import torch.multiprocessing as mp
    two, one = tmp_path / "by-two", tmp_path / "by-one"
    mp.spawn(fsdp_worker, args=(2, free_port(), str(tmp_path / "two.pt"), functools.partial(saved_by, two)), nprocs=2)
    expected = torch.load(tmp_path / "two.pt")
    assert expected and same(resumed_by(two, tiny_model()), expected)
    mp.spawn(fsdp_worker, args=(4, free_port(), str(tmp_path / "four.pt"), functools.partial(resumed_by, two)),
             nprocs=4)
    assert same(torch.load(tmp_path / "four.pt"), expected)
    expected = saved_by(one, tiny_model())
    mp.spawn(fsdp_worker, args=(2, free_port(), str(tmp_path / "back.pt"), functools.partial(resumed_by, one)),
             nprocs=2)
    assert same(torch.load(tmp_path / "back.pt"), expected)


@pytest.mark.slow
def test_sharded_torchao_optimizer_state_resumes_on_every_rank(tmp_path, monkeypatch):
    """The same with torchao's 8-bit AdamW, what the memory plan takes where fp32 moments do not fit
    (make test-vllm installs it; bitsandbytes' rejects FSDP2's DTensors). Twice, sharing one compile cache,
    as two trainings on one machine do: with AOT autograd's cache on, the second dies in optimizer.step,
    which is why spade.py turns it off (launch.as_ranks), as here. The first compiles torchao's step for
    every parameter shape: a long collective timeout."""
    pytest.importorskip("torchao.optim")
    import torch.multiprocessing as mp
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))   # the workers inherit both
    monkeypatch.setenv("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    for attempt in range(2):
        directory = tmp_path / f"run{attempt}"
        directory.mkdir()
        run = functools.partial(optimizer_round_trip, directory, moments="8bit")
        mp.spawn(fsdp_worker, args=(2, free_port(), str(tmp_path / "result.pt"), run, 600), nprocs=2)
        worst, num_states = torch.load(tmp_path / "result.pt")
        assert num_states > 0 and worst == 0.0, attempt
    # What cannot be resharded or converted is one sentence: 8-bit moments of 2 ranks in one process, and
    # 8-bit moments where the plan takes fp32 ones.
    model = tiny_model()
    with pytest.raises(SystemExit, match=r"holds torchao's 8-bit optimizer moments of 2 processes, which cannot be "
                                         r"resharded; resume it with 2, not 1"):
        checkpoint.load_optimizer(grpo.make_optimizer(model, moments="8bit"), model, directory, 0)
    with pytest.raises(SystemExit, match=r"holds 8-bit optimizer moments and this run's memory plan takes fp32 ones"):
        checkpoint.load_optimizer(grpo.make_optimizer(model), model, directory, 0)


# --- the run directory: one process, one run; what cannot be read or written is one sentence ---------
def saved_run(run_dir, steps):
    """A real run directory with a checkpoint after each of `steps` (the tiny model, plain SGD); the
    function that saves one more."""
    from spade import configure
    model, tokenizer = models.tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cfg = configure(dict(model="tiny"))
    run_dir.mkdir(exist_ok=True)
    for step in steps:
        checkpoint.save_checkpoint(run_dir, cfg, model, tokenizer, optimizer, None, {"step": step}, 0)
    return lambda step: checkpoint.save_checkpoint(run_dir, cfg, model, tokenizer, optimizer, None, {"step": step}, 0)


def test_each_checkpoint_keeps_itself_and_the_one_before(tmp_path):
    save = saved_run(tmp_path, [2, 4, 6])
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-00004", "ckpt-00006"]
    (tmp_path / "ckpt-00099").mkdir()                       # a later one, never deleted for an earlier
    save(8)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-00006", "ckpt-00008", "ckpt-00099"]
    assert checkpoint.read_pointer(tmp_path)["checkpoint"] == "ckpt-00008"
    for step in (99998, 100000, 100002):
        (tmp_path / f"ckpt-{step:05d}").mkdir()
    save(100004)                                            # past five digits: by step, not by name
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-100002", "ckpt-100004"]


def test_a_fresh_run_never_writes_into_another_runs_directory(tmp_path):
    saved_run(tmp_path / "old", [2])
    with pytest.raises(SystemExit, match="already holds a run; continue it with --resume"):
        checkpoint.claim(tmp_path / "old", resuming=False)
    checkpoint.claim(tmp_path / "old", resuming=True)         # and held by this process from now on
    with open(tmp_path / "old" / ".lock") as other:            # as another process would try
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    (tmp_path / "busy").mkdir()
    with open(tmp_path / "busy" / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(SystemExit, match="another process is running in"):
            checkpoint.claim(tmp_path / "busy", resuming=False)
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "metrics.jsonl").write_text('{"step": 0}\n')     # killed before its first checkpoint
    with pytest.raises(SystemExit, match="holds a run that saved no checkpoint; remove it or give another --out"):
        checkpoint.claim(tmp_path / "early", resuming=False)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit, match="cannot use .*a_file as the run's directory"):
        checkpoint.claim(tmp_path / "a_file", resuming=False)
    shared = tmp_path / "shared"                                # --out /tmp, say: not made the run's (0700)
    shared.mkdir(mode=0o755)
    (shared / "someone_else").write_text("")
    with pytest.raises(SystemExit, match="shared holds other files: a run needs a new or empty directory"):
        checkpoint.claim(shared, resuming=False)
    assert shared.stat().st_mode & 0o777 == 0o755 and sorted(p.name for p in shared.iterdir()) == ["someone_else"]
    (tmp_path / "empty").mkdir()
    checkpoint.claim(tmp_path / "empty", resuming=False)        # an empty one is fine


@pytest.mark.parametrize("pointer", ["{garbage", "{}", "[1, 2]",
                                     '{"version": 3, "checkpoint": "ckpt-09999", "step": 9, "config": {}}'])
def test_a_pointer_that_is_not_one_names_the_checkpoints_kept(tmp_path, pointer):
    saved_run(tmp_path, [2, 4])
    (tmp_path / "latest").write_text(pointer)
    with pytest.raises(SystemExit, match=r"the checkpoints kept in .*: ckpt-00002, ckpt-00004$"):
        checkpoint.read_pointer(tmp_path)


def test_a_truncated_checkpoint_file_is_one_sentence(tmp_path):
    saved_run(tmp_path, [2, 4])
    state = tmp_path / "ckpt-00004" / "state.pt"
    state.write_bytes(state.read_bytes()[:1000])
    model = models.tiny_model()[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(SystemExit, match=r"ckpt-00004 cannot be read \(RuntimeError: .*ckpt-00002, ckpt-00004"):
        checkpoint.restore(tmp_path / "ckpt-00004", model, optimizer, None, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_gpu_generator_resumes_where_it_was(tmp_path):
    """The in-process engine samples with the GPU's generator: a resume carries on its stream."""
    torch.manual_seed(0)
    torch.rand(3, device="cuda")
    saved_run(tmp_path, [2])
    expected = torch.rand(3, device="cuda")
    torch.manual_seed(1)
    model = models.tiny_model()[0]
    checkpoint.restore(tmp_path / "ckpt-00002", model, torch.optim.SGD(model.parameters(), lr=0.1), None, 0)
    assert torch.equal(torch.rand(3, device="cuda"), expected)


def lost_rank(rank, port, run_dir):
    """Rank 1 dies as a killed rank would, while rank 0 waits for it in the checkpoint's barrier."""
    import datetime
    import os
    import pathlib
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}",
                            timeout=datetime.timedelta(seconds=60))
    if rank == 1:
        os._exit(0)
    try:
        checkpoint.barrier(pathlib.Path(run_dir), "ckpt-00003")
    except SystemExit as e:
        (pathlib.Path(run_dir) / "message").write_text(str(e))


def test_a_rank_lost_while_a_checkpoint_is_written_is_not_a_failed_write(tmp_path):
    import torch.multiprocessing as mp
    saved_run(tmp_path, [2])
    mp.spawn(lost_rank, args=(free_port(), str(tmp_path)), nprocs=2)
    message = (tmp_path / "message").read_text()
    assert message.startswith("spade.py: another rank stopped while ckpt-00003 was being written (")
    assert message.endswith("the checkpoints kept in " + str(tmp_path) + ": ckpt-00002")


def test_a_checkpoint_without_its_optimizer_or_with_a_memory_of_another_shape_is_one_sentence(tmp_path):
    from designer import EnvMemory
    saved_run(tmp_path, [2, 4])
    shutil.rmtree(tmp_path / "ckpt-00004" / "optimizer")
    with pytest.raises(SystemExit, match=r"names ckpt-00004, which lacks optimizer; the checkpoints kept"):
        checkpoint.read_pointer(tmp_path)
    model = models.tiny_model()[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for records in ("{}", "[1, 2]", '[{"game_file": "g"}]'):
        (tmp_path / "ckpt-00002" / "env_memory.json").write_text(records)
        with pytest.raises(SystemExit, match=r"ckpt-00002 cannot be read \(ValueError: expected a JSON list of records"):
            checkpoint.restore(tmp_path / "ckpt-00002", model, optimizer, EnvMemory(tmp_path / "memory.json"), 0)


@pytest.mark.parametrize("damage", [("config.json", lambda text: "[]"), ("tokenizer_config.json", lambda text: "[]"),
                                    ("config.json", lambda text: text.replace('"hidden_size": 128', '"hidden_size": 256'))])
def test_a_checkpoint_whose_model_files_are_not_a_models_is_one_sentence(tmp_path, damage):
    """A resume reads the checkpoint's model/ as data: a config that is no mapping, a tokenizer config that
    is none, or a shape its weights do not have (transformers' TypeError, AttributeError, RuntimeError) is
    the sentence of a checkpoint that cannot be read, naming those kept, not a traceback."""
    from harness import setup
    from spade import configure
    saved_run(tmp_path, [2, 4])
    path = tmp_path / "ckpt-00004" / "model" / damage[0]
    path.write_text(damage[1](path.read_text()))
    with pytest.raises(SystemExit, match=r"ckpt-00004 cannot be read \(\w+Error: .*ckpt-00002, ckpt-00004$"):
        setup.load_trainer(configure(dict(model="tiny")), tmp_path / "ckpt-00004", "cpu", 1, step=4)


def test_a_disk_too_full_for_a_checkpoint_keeps_the_last_good_one(tmp_path):
    save = saved_run(tmp_path, [2])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(SystemExit, match=r"cannot write .*ckpt-00004 .*the checkpoints kept in .*: ckpt-00002$"):
            save(4)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert [p.name for p in tmp_path.iterdir() if "ckpt" in p.name] == ["ckpt-00002"]   # no half-written one left
    assert checkpoint.read_pointer(tmp_path)["step"] == 2
