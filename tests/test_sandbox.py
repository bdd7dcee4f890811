"""Attacks on sandbox/: one hostile property per test, then the happy paths.

Every hostile test asserts the exact SandboxError.kind, that the error arrived within
timeout_s + 2 seconds, that no child process is left behind, and that a fresh sandbox works
right after (the `attack` helper does all four).
"""
import os
import pathlib
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import sandbox
from sandbox.contract import MAX_ERROR_CHARS
from gate import validate_env
from sandbox import EnvSandbox, SandboxError

EXAMPLES = pathlib.Path(__file__).resolve().parent / "fixtures" / "examples"  # METHOD.md 1.4's two
TIMEOUT = 1.5


def need_jail():
    """Skip the test, giving the reason, where the fork server's jail cannot be built here."""
    line = sandbox.isolation()["jail"]
    if line.startswith("missing"):
        pytest.skip(f"this needs the sandbox's jail, which is {line}")


@pytest.fixture
def jail():
    """What JAILED tests ask for (need_jail)."""
    need_jail()


JAILED = pytest.mark.usefixtures("jail")


def env_code(reset="return 'ready', {}", step="return 'ok', 0.0, False, False, {}", top="", init="pass"):
    """An environment whose __init__/reset/step bodies (and module top) are the given snippets."""
    indent = lambda body: textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
    return (f"import os, sys, time, math, json, random\n{textwrap.dedent(top).strip()}\n\n"
            f"class HostileEnv:\n    def __init__(self, max_turns=10, **kwargs):\n{indent(init)}\n\n"
            f"    def reset(self, seed=None):\n{indent(reset)}\n\n"
            f"    def step(self, action):\n{indent(step)}\n")


def _processes():
    """{pid: (parent pid, command line)} of every live process."""
    table = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            table[int(stat.parent.name)] = (parent, (stat.parent / "cmdline").read_bytes())
        except (OSError, IndexError, ValueError):
            continue
    return table


def fork_server_pid():
    """The fork server's pid: the outermost process below the one the trainer started (bubblewrap,
    where it jails it) that runs `python -m sandbox` itself."""
    table, top = _processes(), sandbox._Zygote.get().process.pid
    def below(pid):
        while pid > 1:
            pid = table.get(pid, (0, b""))[0]
            if pid == top:
                return True
        return False
    server = lambda cmd: b"\0-m\0sandbox\0" in cmd and not cmd.split(b"\0")[0].endswith(b"bwrap")
    return next(pid for pid, (parent, cmd) in table.items()
                if server(cmd) and (pid == top or below(pid)) and not server(table.get(parent, (0, b""))[1]))


def zygote_children():
    """Pids of the fork server's children (live or zombie)."""
    server = fork_server_pid()
    return [pid for pid, (parent, _) in _processes().items() if parent == server]


def attack(code, kind, op="step", timeout_s=TIMEOUT, memory_mb=256, bystanders=()):
    """Run `code` until `op` fails; check the kind, the time, the cleanup and recovery."""
    start = time.monotonic()
    box = None
    with pytest.raises(SandboxError) as caught:
        box = EnvSandbox(code, timeout_s=timeout_s, memory_mb=memory_mb)
        box.reset(seed=0)
        box.step("\\boxed{go}")
    elapsed = time.monotonic() - start
    assert caught.value.kind == kind, caught.value.message
    assert elapsed < timeout_s + 2, f"took {elapsed:.1f} s"
    if box is not None:
        assert not box.alive
        assert not os.path.exists(f"/proc/{box.pid}")
    assert set(zygote_children()) == set(bystanders)
    with EnvSandbox(env_code()) as fresh:
        assert fresh.reset() == ("ready", {})
    return caught.value


# --- deadlines -----------------------------------------------------------------------------
def test_infinite_loop_at_import():
    attack(env_code(top="while True: pass"), "timeout")


def test_infinite_loop_in_init():
    attack(env_code(init="while True: pass"), "timeout")


def test_infinite_loop_in_reset():
    attack(env_code(reset="while True: pass"), "timeout")


def test_infinite_loop_in_step():
    attack(env_code(step="while True: pass"), "timeout")


def test_sleeping_step_is_a_timeout():
    attack(env_code(step="time.sleep(60)"), "timeout")


def test_sigterm_ignored_does_not_help():
    attack(env_code(step="import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass"), "timeout")


def test_exception_whose_message_hangs():
    attack(env_code(top="class Evil(Exception):\n    def __str__(self):\n        while True: pass",
                    step="raise Evil()"), "timeout")


def test_stdout_flood_goes_nowhere(capfd):
    attack(env_code(step="while True:\n    print('x' * 65536)\n    sys.stderr.write('y' * 65536)"), "timeout")
    out, err = capfd.readouterr()
    assert "xxxx" not in out and "yyyy" not in err


# --- memory --------------------------------------------------------------------------------
def test_memory_bomb_single_allocation():
    attack(env_code(step="x = bytearray(50 * 2**30)"), "memory")


def test_memory_bomb_gradual():
    attack(env_code(init="self.hoard = []", step="while True: self.hoard.append(bytearray(8 * 2**20))"), "memory")


def test_numpy_memory_bomb():
    attack(env_code(step="import numpy\nnumpy.ones((1 << 16, 1 << 16))"), "memory")


def test_memory_within_limit_is_fine():
    code = env_code(step="import numpy\nx = numpy.ones(20 * 2**20 // 8)\nreturn str(x.sum()), 1.0, True, False, {}")
    with EnvSandbox(code, memory_mb=256) as box:
        box.reset()
        assert box.step("go")[:3] == (str(float(20 * 2**20 // 8)), 1.0, True)


# --- processes and signals -----------------------------------------------------------------
def test_fork_bomb():
    attack(env_code(step="while True: os.fork()"), "contract")


def test_subprocess():
    error = attack(env_code(step="import subprocess\nsubprocess.run(['true'])"), "contract")
    assert "Resource temporarily unavailable" in error.message or "Errno" in error.message


def test_os_system_starts_nothing(tmp_path):
    code = env_code(step="assert os.system('true') == 0, 'os.system failed'")
    assert "os.system failed" in attack(code, "contract").message


def test_thread_cannot_start():
    error = attack(env_code(step="import threading\nthreading.Thread(target=lambda: time.sleep(100)).start()"), "contract")
    assert "(the sandbox runs no threads or processes)" in error.message


@JAILED   # the interpreter may live in a closed home, which the jail binds back
def test_what_ordinary_code_expects_of_a_process():
    """A user name, 200 open files, a 20 MB file, one OpenMP thread for libraries loaded later."""
    code = env_code(reset="""
        import getpass
        files = [open(f'f{i}', 'w') for i in range(200)]
        open('big', 'wb').write(b'x' * (20 << 20))
        return f"{getpass.getuser()} {len(files)} {os.path.getsize('big')} {os.environ['OMP_NUM_THREADS']}", {}""")
    with EnvSandbox(code) as box:
        assert box.reset()[0] == f"sandbox 200 {20 << 20} 1"


def test_kill_parent_is_refused():
    attack(env_code(step="os.kill(os.getppid(), 9)"), "contract")
    assert sandbox._Zygote.get().process.poll() is None


def test_kill_trainer_is_refused():
    attack(env_code(step=f"os.kill({os.getpid()}, 9)"), "contract")


@pytest.mark.skipif(os.getuid() != 0, reason="uid separation needs root")
def test_one_sandbox_cannot_kill_another():
    with EnvSandbox(env_code()) as victim:
        attack(env_code(step=f"os.kill({victim.pid}, 9)"), "contract", bystanders=[victim.pid])
        assert victim.reset() == ("ready", {})


def test_sys_exit_in_step():
    attack(env_code(step="sys.exit(0)"), "contract")


def test_os_exit_in_step():
    assert "status 3" in attack(env_code(step="os._exit(3)"), "crash").message


def test_segfault_via_ctypes():
    assert "SIGSEGV" in attack(env_code(step="import ctypes\nctypes.string_at(0)"), "crash").message


def test_recursion_bomb():
    attack(env_code(top="def f(n):\n    return f(n + 1)", step="f(0)"), "contract")


def test_stack_overflow_with_raised_recursion_limit():
    deep = "sys.setrecursionlimit(10**8)\nx = []\nfor _ in range(3 * 10**5):\n    x = [x]\nrepr(x)"
    attack(env_code(step=deep), "crash", timeout_s=5)


def test_raising_own_limits_is_refused():
    attack(env_code(step="import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))"), "contract")


@pytest.mark.skipif(os.getuid() != 0, reason="privilege drop happens only under root")
def test_cannot_become_root_again():
    attack(env_code(step="os.setuid(0)"), "contract")


def test_del_that_hangs_does_not_block_close():
    code = env_code(init="self.me = self", top="", step="return 'ok', 0.0, False, False, {}").replace(
        "class HostileEnv:", "class HostileEnv:\n    def __del__(self):\n        while True: pass\n")
    box = EnvSandbox(code, timeout_s=TIMEOUT)
    box.reset()
    start = time.monotonic()
    box.close()
    assert time.monotonic() - start < 1 and not box.alive and zygote_children() == []


# --- network, files, secrets ---------------------------------------------------------------
def test_socket_connect_to_localhost():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    attack(env_code(step=f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"), "contract")
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


def test_write_outside_working_directory(tmp_path):
    target = tmp_path / "escaped.txt"
    attack(env_code(step=f"open({str(target)!r}, 'w').write('pwned')"), "contract")
    assert not target.exists()


def test_delete_project_files_is_refused():
    here = pathlib.Path(__file__).resolve()
    attack(env_code(step=f"os.remove({str(here)!r})"), "contract")
    assert here.exists()


def test_working_directory_is_the_private_scratch_space():
    code = env_code(reset="open('notes.txt', 'w').write('x')\nreturn os.getcwd() + ' ' + os.environ['HOME'], {}")
    with EnvSandbox(code) as box:
        assert box.reset()[0] == "/tmp /tmp"
    assert not os.path.exists("/tmp/notes.txt")


def test_file_size_limit():
    attack(env_code(step="open('big', 'wb').write(b'x' * (65 * 2**20))"), "contract")


def test_secrets_are_not_inherited(monkeypatch):
    monkeypatch.setenv("SPADE_FAKE_API_KEY", "sk-test-secret-123")
    code = env_code(reset=f"""
        seen = json.dumps(dict(os.environ))
        try:
            seen += open('/proc/{os.getpid()}/environ').read()
        except OSError:
            pass
        return seen, {{}}""")
    with EnvSandbox(code) as box:
        observation, _ = box.reset()
    assert "sk-test-secret-123" not in observation and "SPADE_FAKE_API_KEY" not in observation


def test_stdin_is_empty():
    attack(env_code(step="input('move? ')"), "contract")


def test_closing_standard_fds_is_harmless():
    code = env_code(step="for fd in (0, 1, 2):\n    os.close(fd)\nreturn 'still here', 0.0, False, False, {}")
    with EnvSandbox(code) as box:
        box.reset()
        assert box.step("x")[0] == "still here"


def test_import_of_heavy_module_fails_to_load():
    attack(env_code(top="import torch"), "load", op="load")


# --- what comes back -------------------------------------------------------------------------
def test_huge_observation():
    attack(env_code(step="return 'x' * (100 * 2**20), 0.0, False, False, {}"), "output")


def test_huge_info():
    attack(env_code(step="return 'ok', 0.0, False, False, {'blob': 'y' * (2 * 2**20)}"), "output")


def test_garbage_written_to_the_reply_socket():
    attack(env_code(step="""
        import socket as s
        for fd in range(3, 64):
            try:
                if s.socket(fileno=os.dup(fd)).type == s.SOCK_STREAM:
                    os.write(fd, b'\\xff' * 16)
            except OSError:
                pass
        time.sleep(5)"""), "output")


def test_monkey_patched_serialiser():
    attack(env_code(step="json.dumps = lambda *a, **k: 'not json at all'\nreturn 'ok', 0.0, False, False, {}"), "output")


def test_non_string_observation():
    attack(env_code(step="return 42, 0.0, False, False, {}"), "contract")


def test_wrong_tuple_length():
    assert "length 3" in attack(env_code(step="return 'ok', 0.0, False"), "contract").message


def test_nan_reward():
    attack(env_code(step="return 'ok', float('nan'), False, False, {}"), "contract")


def test_inf_reward():
    attack(env_code(step="return 'ok', float('inf'), True, False, {}"), "contract")


def test_reward_that_is_not_a_number():
    attack(env_code(step="return 'ok', 'lots', True, False, {}"), "contract")


def test_huge_exception_message_is_truncated():
    error = attack(env_code(step="raise ValueError('z' * (10 * 2**20))"), "contract")
    assert len(error.message) <= MAX_ERROR_CHARS + 64 and error.message.startswith("ValueError: zzz")


def test_syntax_error_is_a_load_error():
    attack("class BrokenEnv(:\n    pass\n", "load", op="load")


def test_missing_env_class_is_a_load_error():
    assert "Env" in attack("class Helper:\n    pass\n", "load", op="load").message


def test_exception_in_init_is_a_load_error():
    assert "ZeroDivisionError" in attack(env_code(init="1 / 0"), "load", op="load").message


def test_play_time_coercion():
    code = env_code(reset="return 'plain string'", step="import numpy\nreturn 'ok', numpy.float32(0.5), numpy.bool_(True), 0, {'n': 3, 'obj': object()}")
    with EnvSandbox(code) as box:
        assert box.reset() == ("plain string", {})
        assert box.step("a") == ("ok", 0.5, True, False, {"n": 3})


def test_unseeded_randomness_in_step_plays_the_same_for_the_same_seed():
    # Dice drawn from the global generators without seeding them: every sandbox is a fresh fork (Python
    # reseeds `random` from the OS at fork), yet the ranks of a multi-GPU run must see the same plays.
    code = env_code(step="import numpy\nreturn f'{random.random()} {numpy.random.rand()} {set(\"abcdef\")}', 0.0, False, False, {}")
    plays = []
    for seed in (7, 7, 8):
        with EnvSandbox(code) as box:
            box.reset(seed=seed)
            plays.append([box.step("roll")[0] for _ in range(3)])
    assert plays[0] == plays[1] and plays[0] != plays[2]


def test_future_annotations_and_dataclasses_load():
    # `from __future__ import annotations` is an import of a module (it failed after the uid drop where
    # the interpreter is not world-readable), and dataclasses then resolve the string annotations
    # through the class's module, which must exist in sys.modules.
    example = (EXAMPLES / "vault_dial.py").read_text()
    assert validate_env("from __future__ import annotations\n" + example).ok
    code = "from __future__ import annotations\n" + env_code(
        top="from dataclasses import dataclass, field\n\n@dataclass\nclass Board:\n    cells: list[int] = field(default_factory=list)",
        reset="return str(Board([1, 2])), {}")
    with EnvSandbox(code) as box:
        assert box.reset()[0] == "Board(cells=[1, 2])"


@JAILED   # the interpreter may live in a closed home, which the jail binds back
def test_standard_library_modules_and_codecs_load_whoever_installed_python():
    # Each of these once failed in the child: imported lazily, after the uid drop, where the interpreter's
    # directory is not world-readable (numpy's generators import `secrets` on first use).
    code = env_code(top="import numpy as np\nimport logging, pathlib, zoneinfo, ipaddress, sched, codecs, queue\n"
                        "from urllib.parse import urlencode",
                    reset="rng, legacy = np.random.default_rng(seed), np.random.RandomState(seed)\n"
                          "return ' '.join([codecs.encode('abc', 'rot13'), b'xn--bcher-kva'.decode('idna'), "
                          "'é'.encode('cp437').decode('cp437'), urlencode({'a': 1}), str(ipaddress.ip_address('10.0.0.1')), "
                          "str(rng.integers(6) + legacy.randint(6) >= 0), str(queue.Queue().qsize())]), {}")
    assert validate_env(code).ok
    with EnvSandbox(code) as box:
        assert box.reset(seed=3)[0] == "nop bücher é a=1 10.0.0.1 True 0"


def test_max_turns_is_capped_at_25():
    with EnvSandbox(env_code(init="self.max_turns = 1000", reset="return str(self.max_turns), {}")) as box:
        assert box.reset()[0] == "25"


def test_dead_sandbox_refuses_calls():
    box = EnvSandbox(env_code(step="os._exit(1)"), timeout_s=TIMEOUT)
    box.reset()
    with pytest.raises(SandboxError):
        box.step("x")
    with pytest.raises(SandboxError, match="closed"):
        box.reset()


# --- happy paths: both examples play to a win --------------------------------------------------
def test_vault_dial_plays_to_a_win():
    with EnvSandbox((EXAMPLES / "vault_dial.py").read_text()) as box:
        box.reset(seed=7)
        for dial in "ABC":                                   # binary search on each dial
            low, high = 0, 9
            while True:
                guess = (low + high) // 2
                obs = box.step(f"\\boxed{{probe {dial} {guess}}}")[0]
                if "correct" in obs:
                    break
                low, high = (guess + 1, high) if "higher" in obs else (low, guess - 1)
        obs, reward, terminated, truncated, _ = box.step("\\boxed{open}")
    assert (reward, terminated, truncated) == (1.0, True, False), obs


def test_parcel_desk_plays_to_a_win():
    with EnvSandbox((EXAMPLES / "parcel_desk.py").read_text()) as box:
        first, _ = box.reset(seed=3)
        assert {tool["function"]["name"] for tool in box.tools()} >= {"find_parcel", "reroute", "set_status"}
        recipient = re.search(r"waiting for (\w+)", first).group(1)
        out = box.call_tool("find_parcel", {"recipient": recipient})
        parcel = re.match(r"(P\d+)", out).group(1)
        hub = re.search(r"to the (\w+) hub", out).group(1)
        box.call_tool("reroute", {"parcel_id": parcel, "hub": hub})
        assert "ALL STEPS COMPLETE" in box.call_tool("set_status", {"parcel_id": parcel, "status": "released"})
        assert "Error" in box.call_tool("no_such_tool", {})
        assert box.step("<answer>done</answer>")[1:3] == (1.0, True)


def test_docstring_examples():
    import doctest
    from sandbox import contract
    assert doctest.testmod(sandbox).failed == 0 and doctest.testmod(contract).failed == 0


# --- imports as in the trainer ------------------------------------------------------------------
SIDE_EFFECTS = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"}   # a browser, a print, Tk


@JAILED
def test_every_module_the_trainer_can_import_imports_in_a_sandbox():
    import importlib.util
    names = [n for n in sorted(sys.stdlib_module_names) if not n.startswith("_") and n not in SIDE_EFFECTS
             and importlib.util.find_spec(n) is not None] + ["numpy", "sympy", "math_verify"]
    assert len(names) > 150
    code = env_code(top="import importlib", reset=f"""
        failed = []
        for name in {names!r}:
            try:
                importlib.import_module(name)
            except Exception as e:
                failed.append(f'{{name}}: {{type(e).__name__}}: {{e}}')
        return ' | '.join(failed) or 'all imported', {{}}""")
    with EnvSandbox(code, timeout_s=120, memory_mb=2048) as box:
        assert box.reset()[0] == "all imported"


def test_the_official_base_class_import_path_is_ours():
    example = (EXAMPLES / "parcel_desk.py").read_text()
    official = "from spade.core.envs.tool_use_base_env import ToolUseBaseEnv\n" + example
    assert validate_env(official).ok
    code = env_code(top="""
        import spade.core.envs.tool_use_base_env as base
        from tool_use_base_env import ToolUseBaseEnv
        class Probe(ToolUseBaseEnv):
            def reset(self, seed=None):
                return "obs" + self._obs_suffix(), {}""",
                    reset="return f'{base.ToolUseBaseEnv is ToolUseBaseEnv} {Probe().reset()[0]}', {}")
    with EnvSandbox(code) as box:
        assert box.reset()[0] == "True obs"


# --- where a layer is missing: the others hold, and it is said --------------------------------------
FALLBACK = """
import sandbox
print(sandbox.isolation()["jail"])
with sandbox.EnvSandbox({code!r}) as box:
    print(box.reset()[0])
"""


@pytest.mark.parametrize("how", ["absent", "failing"])
def test_without_a_working_bubblewrap_the_sandbox_runs_unjailed_and_says_so(how, tmp_path):
    """No bwrap on PATH, or one that cannot create its namespaces (as in an unprivileged container)."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    path = str(tmp_path) + ":/usr/bin:/bin" if how == "failing" else str(tmp_path / "nothing")
    result = subprocess.run([sys.executable, "-c", FALLBACK.format(code=env_code())], capture_output=True, text=True,
                            cwd=pathlib.Path(sandbox.__file__).parents[1], env={"PATH": path}, timeout=120)
    jail, observation = result.stdout.splitlines()
    expected = "No permissions to create a new namespace" if how == "failing" else "bubblewrap is not installed"
    assert jail.startswith("missing: ") and expected in jail and observation == "ready", result.stderr
    assert "isolation is partial here; missing: jail" in result.stderr


TRAINER = """
import sys, threading, sandbox
box = []
thread = threading.Thread(target=lambda: box.append(sandbox.EnvSandbox({code!r})))   # started off the main thread
thread.start()
thread.join()
print(box[0].pid, sandbox._Zygote.get().process.pid, flush=True)
sys.stdin.read()
"""


def test_the_fork_server_and_its_children_go_with_the_trainer():
    """Killing the trainer (SIGKILL: no atexit) takes bubblewrap, the fork server and the sandboxes with it;
    the fork server does not die with the thread that happened to start it."""
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER.format(code=env_code())], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=pathlib.Path(sandbox.__file__).parents[1])
    child, server = map(int, trainer.stdout.readline().split())
    time.sleep(0.5)
    assert os.path.exists(f"/proc/{child}") and os.path.exists(f"/proc/{server}")
    trainer.kill()
    trainer.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (os.path.exists(f"/proc/{child}") or os.path.exists(f"/proc/{server}")):
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}") and not os.path.exists(f"/proc/{server}")


def test_sandbox_bench_runs_at_a_tiny_size(capsys):
    from bench import sandbox_bench
    rows = sandbox_bench.main(["--envs", "2", "--steps", "2"])
    assert set(rows) == set(sandbox_bench.METHODS)
    assert all(med > 0 for row in rows.values() for med, _ in row)
    assert "spade sandbox (fork server)" in capsys.readouterr().out


def test_a_fork_server_started_again_keeps_every_layer():
    """The fork server dies (an OOM kill, say) and the next sandbox starts a new one: it still has its jail
    and its memory cgroup, though the old one's close removed that cgroup's directory."""
    before = sandbox.isolation()
    old = sandbox._Zygote.get()
    with EnvSandbox(env_code()) as box:   # a slot cgroup below the trainer's, then the fork server dies
        box.reset()
    old.process.kill()
    old.process.wait()
    with EnvSandbox(env_code()) as box:
        assert box.reset()[0] == "ready"
    assert sandbox._Zygote.get() is not old
    assert sandbox.isolation() == before


def test_removing_a_cgroup_never_recurses_into_what_a_child_made(tmp_path):
    """A child that can write its slot may nest directories there as deep as it likes: removing the
    trainer's cgroup takes its empty slots and gives up quietly on the rest, never a RecursionError."""
    from sandbox import confine
    (tmp_path / "slot-0").mkdir()
    (tmp_path / "slot-1").mkdir()
    here, depth = os.getcwd(), 3000   # deeper than the recursion limit, made relative to stay under PATH_MAX
    os.chdir(tmp_path / "slot-1")
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        os.chdir(here)
        confine.remove_cgroup(str(tmp_path))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["slot-1"]
    finally:   # taken down a level at a time (shutil.rmtree recurses too)
        os.chdir(tmp_path / "slot-1")
        for _ in range(depth):
            os.chdir("d")
        for _ in range(depth):
            os.chdir("..")
            os.rmdir("d")
        os.chdir(here)
