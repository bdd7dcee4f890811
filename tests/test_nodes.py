"""Beyond one node, on torchrun: two launchers on loopback stand in for two nodes (gloo, the tiny model);
tensor parallelism stays inside a node; a job torchrun restarts goes on from its last checkpoint."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import spade
from backend import launch, models
from harness import plan, setup
from backend.launch import free_port

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
FAST = ["--model", "tiny", "--regen-interval", "2", "--num-envs", "2", "--plays-per-env", "2",
        "--max-new-tokens", "16", "--max-turns", "2", "--lr", "1e-3"]


def nodes(args_of, port, cwd_of=lambda node: ROOT):
    """Two torchrun launchers, one rank each, as two nodes would start (static rendezvous on loopback)."""
    return [subprocess.Popen([*TORCHRUN, "--nnodes=2", "--nproc_per_node=1", f"--node_rank={node}",
                              "--master_addr=127.0.0.1", f"--master_port={port}", str(ROOT / "spade.py"),
                              *args_of(node)], cwd=cwd_of(node), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True) for node in (0, 1)]


def finished(launchers, timeout=300):
    return [(p.wait(timeout=timeout), p.stdout.read()) for p in launchers]


def test_two_nodes_run_to_the_end_and_their_run_resumes_in_one_process(tmp_path):
    """Two nodes of one rank each (hybrid sharding: a copy a node) in a run directory they share; then the
    run goes on in one process: the model's checkpoint is whole and the optimizer's resharded
    (checkpoint.load_optimizer), as for a job that lost a node (more processes: test_checkpoint.py)."""
    out = tmp_path / "shared"
    (status0, output0), (status1, output1) = finished(nodes(lambda node: [*FAST, "--steps", "2", "--out", str(out)],
                                                            free_port()))
    assert status0 == status1 == 0, output0[-3000:] + output1[-3000:]
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    alone = subprocess.run([sys.executable, str(ROOT / "spade.py"), "--resume", str(out), "--steps", "3"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0 and f"resumed {out} at step 2" in alone.stdout, alone.stdout[-3000:] + alone.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps] == [0, 1, 2] and steps[-1]["grpo/num_samples"] > 0


def test_two_nodes_with_run_directories_of_their_own_are_refused_before_the_model_loads(tmp_path):
    """Node 1 runs in another directory with the same relative --out: one sentence on both, before step 0,
    and no directory left behind."""
    places = [tmp_path / "node0", tmp_path / "node1"]
    for place in places:
        place.mkdir()
    outputs = finished(nodes(lambda node: [*FAST, "--steps", "2", "--out", "out/run"], free_port(),
                             cwd_of=lambda node: places[node]))
    for status, output in outputs:
        assert status != 0 and "step    0" not in output, output[-3000:]
        assert "rank 1 (" in output and "cannot read the run directory out/run that rank 0" in output, output[-3000:]
    assert not (places[0] / "out" / "run").exists() and not (places[1] / "out" / "run").exists()


def rank_pid(parent, rank):
    """The pid of `rank` among the processes below `parent` (torchrun's agent starts its workers)."""
    for pid in subprocess.check_output(["ps", "-e", "-o", "pid="], text=True).split():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if ppid == parent and f"RANK={rank}".encode() in environ and b"TORCHELASTIC_RESTART_COUNT=0" in environ:
            return int(pid)
    return None


def test_a_rank_killed_under_max_restarts_comes_back_and_the_run_logs_each_step_once(tmp_path):
    out = tmp_path / "restarted"
    job = subprocess.Popen([*TORCHRUN, "--standalone", "--nproc_per_node=2", "--max-restarts=1",
                            str(ROOT / "spade.py"), *FAST, "--steps", "3", "--save-every", "1", "--out", str(out)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (out / "latest").is_file():
            time.sleep(0.2)
        victim = rank_pid(job.pid, 1)
        assert victim is not None and (out / "latest").is_file(), "no first checkpoint"
        os.kill(victim, signal.SIGKILL)
        output = job.communicate(timeout=300)[0]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 0 and "resumed" in output, output[-5000:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2], output[-3000:]


def test_a_job_torchrun_may_restart_needs_a_fixed_out_and_goes_on_from_its_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    with pytest.raises(SystemExit, match="give --out a directory of its own"):
        launch.after_restart({"model": "tiny"}, spade.Config.out)
    given = {"model": "tiny", "out": str(tmp_path)}
    assert launch.after_restart(given, spade.Config.out) == given            # the first start
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert launch.after_restart(given, spade.Config.out) == given            # no checkpoint yet: from the start
    (tmp_path / "latest").write_text("{}")
    assert launch.after_restart(given, spade.Config.out) == {**given, "resume": str(tmp_path)}
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0")
    assert launch.after_restart(given, spade.Config.out) == given            # torchrun will not restart it


def test_tensor_parallel_groups_never_span_a_node(monkeypatch):
    """The choices are the divisors of a node's GPUs; groups are consecutive ranks, which torchrun numbers
    node by node; a --tp that would span nodes is refused in one sentence."""
    assert plan.tp_choices(8) == [1, 2, 4, 8] and plan.tp_choices(6) == [1, 2, 3, 6] and plan.tp_choices(8, 4) == [4]
    for world, node in ((16, 8), (8, 4), (12, 6)):
        for tp in plan.tp_choices(node):
            groups = [range(g, g + tp) for g in range(0, world, tp)]   # launch.TensorParallelGroup's
            assert all(len({rank // node for rank in group}) == 1 for group in groups), (world, node, tp)
    moe = models.random_config("random-qwen3-30b-a3b", models.tiny_tokenizer())
    chosen = plan.plan(moe, 16, int(79.2 * plan.GiB), plan.Knobs(), node_gpus=8)
    assert chosen.problem is None and 8 % chosen.tp == 0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    cfg = spade.configure(dict(model="tiny", tp=8))
    with pytest.raises(SystemExit, match="--tp 8 does not divide the 4 ranks of a node"):
        setup.engine_tp(cfg, "vllm", 8, None)
    assert setup.engine_tp(spade.configure(dict(model="tiny", tp=2)), "vllm", 8, None) == 2

