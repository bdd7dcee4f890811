"""launch.py's supervision of ranks, with test-double rank scripts (a few lines of Python each).
The real spade.py as two gloo ranks through launch_ranks is in test_spade.py."""
import doctest
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from backend import launch

# A test double of a rank: rank 1 fails at once, the others would wait for it forever.
ONE_RANK_DIES = """
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(3)
time.sleep(600)
"""
# A test double of a rank that records its environment and how it was stopped.
RECORDS_CTRL_C = """
import os, signal, sys, time
out = sys.argv[1] + "/rank" + os.environ["RANK"]
def stopped(signum, frame):
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # as launch.install_sigint_handler: a second one is harmless
    open(out, "w").write(" ".join([*(os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")),
                                   str(signum)]))
    sys.exit(0)
signal.signal(signal.SIGINT, stopped)
signal.signal(signal.SIGUSR1, stopped)
print("rank", os.environ["RANK"], "ready", flush=True)
os.write(2, f"rank {os.environ['RANK']} error stream\\n".encode())  # one write: the ranks share the pipe
open(out + ".ready", "w").close()
time.sleep(600)
"""


def test_docstring_examples():
    assert doctest.testmod(launch).failed == 0


def test_a_rank_that_dies_takes_the_others_down_and_its_status_is_returned(tmp_path, capsys):
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    script = tmp_path / "rank.py"
    script.write_text(ONE_RANK_DIES)
    start = time.time()
    assert launch.launch_ranks([], 3, str(script), poll_s=0.05) == 3
    assert time.time() - start < 60   # not the 600 s the survivors would have waited
    assert "rank 1 exited with status 3; stopped the others" in capsys.readouterr().err
    script.write_text(ONE_RANK_DIES.replace("sys.exit(3)", "os.kill(os.getpid(), 9)"))
    assert launch.launch_ranks([], 2, str(script), poll_s=0.05) == 128 + 9
    assert "rank 1 was killed by signal 9 (Killed); stopped the others" in capsys.readouterr().err
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == blocked    # this process's Ctrl-C is its own again


def started_ranks(tmp_path):
    """launch_ranks of two RECORDS_CTRL_C ranks, once both are ready."""
    script = tmp_path / "rank.py"
    script.write_text(RECORDS_CTRL_C)
    code = f"import sys; from backend import launch; sys.exit(launch.launch_ranks([{str(tmp_path)!r}], 2, {str(script)!r}, poll_s=0.05))"
    launcher = subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(launch.__file__)),
                                start_new_session=True,  # its own process group, as a terminal's job
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not all((tmp_path / f"rank{r}.ready").exists() for r in (0, 1)):
        time.sleep(0.05)
    return launcher


def test_ctrl_c_to_the_terminal_reaches_every_rank_and_not_the_launcher(tmp_path):
    launcher = started_ranks(tmp_path)
    os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    stdout, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 0
    assert stdout.split("\n")[0] == "rank 0 ready" and "rank 1" not in stdout        # rank 0 alone prints
    assert "rank 0 error stream" in stderr and "rank 1 error stream" in stderr   # errors of every rank show
    seen = [(tmp_path / f"rank{r}").read_text().split() for r in (0, 1)]
    assert [s[:3] for s in seen] == [["0", "0", "2"], ["1", "1", "2"]] and seen[0][3] == seen[1][3]
    assert [s[4] for s in seen] == [str(int(signal.SIGINT))] * 2          # their own, not the launcher's


def test_a_sigint_to_the_launcher_alone_reaches_the_ranks_as_sigusr1(tmp_path):
    """`kill -INT <launcher>` (a scheduler, a script): the ranks stop after their step, as on a first
    Ctrl-C (SIGUSR1 never aborts them, so a terminal's Ctrl-C passed on as well still counts once)."""
    launcher = started_ranks(tmp_path)
    os.kill(launcher.pid, signal.SIGINT)
    launcher.communicate(timeout=60)
    assert launcher.returncode == 0
    assert [(tmp_path / f"rank{r}").read_text().split()[4] for r in (0, 1)] == [str(int(signal.SIGUSR1))] * 2


def test_a_stray_rank_variable_is_one_sentence(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match="RANK is set but WORLD_SIZE, MASTER_ADDR, MASTER_PORT not"):
        launch.setup_distributed()


@pytest.mark.parametrize("visible", [1, 2])
def test_gpus_that_are_visible_but_unusable_stop_the_run_before_anything_loads(monkeypatch, visible):
    # A driver too old for torch's CUDA build: NVML counts the GPUs, CUDA cannot use them. Simulated here.
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def init():
        raise RuntimeError("The NVIDIA driver on your system is too old (found version 11040).\nMore text")
    monkeypatch.setattr(torch.cuda, "init", init)
    monkeypatch.setattr(launch, "launch_ranks", lambda *args: pytest.fail("ranks started on unusable GPUs"))
    with pytest.raises(SystemExit) as stop:
        launch.as_ranks(["--model", "tiny"], "spade.py")
    message = str(stop.value)
    assert message.startswith(f"spade.py: {visible} GPU") and "visible but CUDA cannot use them" in message
    assert "driver on your system is too old (found version 11040)" in message and "\n" not in message
    assert "CUDA_VISIBLE_DEVICES=" in message


def test_usable_or_absent_gpus_pass(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert launch.usable_gpus() == 0
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert launch.usable_gpus() == 4


def test_one_process_agrees_with_itself():
    stop = launch.install_sigint_handler()
    try:
        assert launch.agreed(stop, 1) is False
        stop.set()
        assert launch.agreed(stop, 1) is True
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class EchoEngine:
    """A test double of an engine: the completion of a prompt is the prompt."""
    sleeping = False

    def generate(self, prompts, params):
        return [list(p) for p in prompts]

    def sleep(self):
        self.sleeping = True


def agreement_worker(rank, world, port, out):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    engine, results = launch.RankAgreement(EchoEngine()), []
    results.append(engine.generate([[1, 2], [3]], None))                 # the same on both ranks
    engine.sleep()                                                       # the engine's own methods pass through
    results.append(engine.engine.sleeping)
    try:
        engine.generate([[1, 2], [3 + rank]], None)                      # rank 1 diverged
    except RuntimeError as e:
        results.append(str(e))
    open(f"{out}/rank{rank}.json", "w").write(json.dumps(results))
    dist.destroy_process_group()


def test_ranks_that_ask_for_different_prompts_stop_with_an_error_not_a_hang(tmp_path):
    import torch.multiprocessing as mp
    mp.spawn(agreement_worker, args=(2, launch.free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        same, slept, error = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert same == [[1, 2], [3]] and slept is True and "different prompts" in error


def divergence_worker(rank, world, port, out):
    import random
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    launch.reseed(world, stream=rank)                                      # a divided phase: a stream each
    own = [torch.rand(3).tolist(), random.random()]
    torch.rand(10 + 5 * rank), [random.random() for _ in range(rank)]     # unequal draws
    launch.reseed(world)
    result = [launch.from_rank_0(f"out/rank{rank}", world), torch.rand(3).tolist(), random.random(), own]
    open(f"{out}/rank{rank}.json", "w").write(json.dumps(result))
    dist.destroy_process_group()


def test_ranks_draw_apart_in_their_own_streams_and_alike_after_a_reseed(tmp_path):
    import torch.multiprocessing as mp
    mp.spawn(divergence_worker, args=(2, launch.free_port(), str(tmp_path)), nprocs=2)
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert first[:3] == second[:3] and first[0] == "out/rank0"
    assert first[3][0] != second[3][0] and first[3][1] != second[3][1]   # their own streams differed


class BatchingEngine:
    """A test double of vLLM's engine: each call of a batch completes a prompt with its tokens times 10."""

    def __init__(self):
        self.batches = []

    def generate_each(self, calls):
        self.batches.append(calls)
        return [[[10 * t for t in prompt] for prompt in prompts] for prompts, _ in calls]


def group_worker(rank, world, port, out):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    engine = BatchingEngine()
    group, completions = launch.TensorParallelGroup(engine, 2, world), []
    with group.independent():
        for n in range(rank + 1):                      # rank r has r + 1 calls to make
            completions.append(group.generate([[rank, n]], f"params {n}"))
    open(f"{out}/rank{rank}.json", "w").write(json.dumps([completions, engine.batches]))
    dist.destroy_process_group()


def test_a_tensor_parallel_group_runs_its_ranks_calls_together_and_each_keeps_its_own(tmp_path):
    import torch.multiprocessing as mp
    mp.spawn(group_worker, args=(4, launch.free_port(), str(tmp_path)), nprocs=4)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    for r, (completions, _) in enumerate(ranks):
        assert completions == [[[10 * r, 10 * n]] for n in range(r + 1)]
    # Ranks 0-1 and 2-3 are groups: both engines of a group run the same batches (vLLM's tensor-parallel
    # ranks must), a rank that is done joins with nothing to ask, and the groups run apart.
    assert ranks[0][1] == ranks[1][1] == [[[[[0, 0]], "params 0"], [[[1, 0]], "params 0"]], [[[[1, 1]], "params 1"]]]
    assert ranks[2][1] == ranks[3][1] and len(ranks[3][1]) == 4 and ranks[3][1][3] == [[[[3, 3]], "params 3"]]


def test_terminating_the_launcher_terminates_the_ranks(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RECORDS_CTRL_C)
    code = f"import sys; from backend import launch; sys.exit(launch.launch_ranks([{str(tmp_path)!r}], 2, {str(script)!r}, poll_s=0.05))"
    launcher = subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(launch.__file__)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not all((tmp_path / f"rank{r}.ready").exists() for r in (0, 1)):
        time.sleep(0.05)
    ranks = subprocess.check_output(["ps", "--ppid", str(launcher.pid), "-o", "pid="], text=True).split()
    launcher.terminate()                     # `kill <launcher>`, as a job scheduler might
    assert launcher.wait(timeout=60) == 128 + signal.SIGTERM
    assert len(ranks) == 2 and not any(os.path.exists(f"/proc/{pid}") for pid in ranks)
