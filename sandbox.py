"""The only place model-written environment code runs.

An environment is Python written by a model that is being trained. It may loop forever, allocate
50 GB, fork, open sockets, delete files, read secrets, print megabytes, return garbage or crash the
interpreter. The trainer must survive all of it, so environment code never runs in the trainer:

    with EnvSandbox(code, timeout_s=30.0, memory_mb=1024) as env:   # one instance, one child process
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("\\boxed{open}")

    validate_env(response_text).ok                                    # the designer's gate (METHOD 3.1)

What environment code must look like, how it is constructed and what its replies are coerced to
is contract.py (METHOD.md 1); this file runs that code in isolation.

How. A fork server ("zygote") is started once per trainer process: a fresh interpreter that imports
the standard-library modules environments use and numpy, then waits. Each EnvSandbox asks it to
fork one child; the child isolates itself and serves requests over a socket pair with a compact
framing (4-byte length + JSON; JSON, never pickle, because the parent must not unpickle what
untrusted code wrote). Forking a warm interpreter costs milliseconds, not the ~50 ms of a new one.

What each child gets (protected against; confine.py sets up the namespaces, limits and uid):
- a hard per-call deadline enforced by the parent: past it, the process group is SIGKILLed;
- RLIMIT_AS = the zygote's address space (numpy included, ~140+ MB) + memory_mb; RLIMIT_CPU set
  before every call to the CPU time used + the deadline + 1 s (so the parent's deadline fires
  first); RLIMIT_FSIZE 16 MiB per file; RLIMIT_NOFILE 64; RLIMIT_NPROC 0, which forbids fork,
  subprocess, os.system and also new threads; no core dumps;
- an unprivileged uid of its own when the trainer is root (root ignores RLIMIT_NPROC; a uid per
  sandbox also stops one sandbox signalling another, the zygote or the trainer, or reading their
  /proc/<pid>/environ); its own session and process group;
- no network: when the kernel allows (root, or unprivileged user namespaces), the zygote enters a
  new network namespace with no interfaces, so even 127.0.0.1 is unreachable; otherwise a refusing
  socket layer is installed in the child (which determined code can bypass via `_socket`).
  `isolation()` says which one is active;
- a private mount namespace where the kernel allows it, with a fresh tmpfs on /tmp and /dev/shm,
  so nothing written there reaches the host; a fresh working directory per child, removed when it
  is reaped; everything else outside it is writable only where the unprivileged uid could already
  write (nowhere, on a normal install);
- an environment with no secrets: the zygote starts with only a minimal PATH (plus thread-count
  and hash-seed variables), so no API key of the trainer is ever inherited;
- stdin/stdout/stderr on /dev/null (printing megabytes goes nowhere), replies capped at 1 MiB
  (observation plus info) in the child and again in the parent, which never reads more;
- the zygote exits and kills its children when the trainer dies (it sees its socket close).

What it does NOT protect against: syscalls in general (no seccomp filter: a kernel exploit
escapes), reading world-readable files (/etc, the code of this project), CPU side channels, using
the whole CPU for up to the deadline, or disk/memory pressure on the tmpfs up to its size. Imports
of modules that the zygote has not preloaded fail after the uid drop where the interpreter's own
directory is not readable by other users (elsewhere they work): PRELOAD holds the standard library
that environment code was found to use, which is what the designer prompt allows.

Every failure raises SandboxError with .kind in {"load", "contract", "timeout", "memory",
"crash", "output"}; after it the child and its process group are dead and reaped and .alive is
False. The agent turns it into an episode reward of -1 (METHOD.md 1.1); nothing here hides it.
"""
import ast
import itertools
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from confine import confine_child, isolate_zygote
from contract import (MAX_ACTION_CHARS, MAX_ERROR_CHARS, PLAY_MAX_TURNS, ContractError, ToolUseBaseEnv,  # noqa: F401
                      construct, describe, extract_code, gate, load_env_class, play_reset, play_step,
                      repair_braces)

MAX_REPLY_BYTES = 1 << 20          # observation + info, per reply
KINDS = ("load", "contract", "timeout", "memory", "crash", "output")

# Modules the zygote imports before any child exists: after the uid drop an interpreter installed in a
# directory other users cannot read (under /root, say) imports nothing else, and stdlib modules that
# model-written code uses would fail to load on one machine and not on another. METHOD 1.1's
# namespace and what its names need; what hostile code reaches for; numpy.random with `secrets`, which
# its generators import on first use; `__future__` (`from __future__ import annotations` is an import);
# every codec (`codecs.encode(s, "rot13")` looks its module up by name); and what environment code
# commonly imports besides. An audit of 52 environments in the style of model output found these.
PRELOAD = """__future__ abc array base64 bisect calendar cmath codecs collections collections.abc colorsys
copy csv ctypes dataclasses datetime decimal difflib enum fractions functools graphlib hashlib heapq
html io ipaddress itertools json logging math numbers operator pathlib pprint queue random re sched
secrets shlex socket statistics string struct subprocess textwrap time traceback types typing
unicodedata urllib.parse uuid warnings weakref zlib zoneinfo _strptime numpy numpy.random""".split()


class SandboxError(Exception):
    """A failure of environment code or of its process. `.kind` is one of KINDS."""

    def __init__(self, kind, message):
        assert kind in KINDS, kind
        super().__init__(f"[{kind}] {message}")
        self.kind, self.message = kind, message


# ---------------------------------------------------------------------------------------------
# Child side: what runs inside the forked, isolated process.
# ---------------------------------------------------------------------------------------------
def _serve(sock, max_turns):
    """The child's request loop: one request in, one reply out, until the parent kills us."""
    env = None
    handlers = {
        "load": lambda req: _load(req, max_turns),
        "reset": lambda req: play_reset(env, req.get("seed")),
        "step": lambda req: play_step(env, req["action"]),
        "tools": lambda req: json.loads(json.dumps(env.get_tools())) if hasattr(env, "get_tools") else [],
        "call_tool": lambda req: str(env.execute_tool(req["name"], req["arguments"]).get("output", "")),
        "validate": lambda req: gate(req["code"]),
    }
    reserve = bytearray(1 << 20)  # released on MemoryError so that the reply can be built
    while True:
        request = _recv(sock, float("inf"))
        reserve = reserve or bytearray(1 << 20)
        try:
            _set_cpu_limit(request.get("timeout_s", 30.0))
            value = handlers[request["op"]](request)
            if request["op"] == "load":
                env, value = value
            reply = {"ok": True, "value": value}
        except ContractError as e:
            reply = {"ok": False, "kind": e.kind, "error": str(e)}
        except MemoryError:
            reserve = None
            reply = {"ok": False, "kind": "memory", "error": "the environment ran out of memory (RLIMIT_AS)"}
        except BaseException as e:  # SystemExit, KeyboardInterrupt, ... raised by environment code
            reply = {"ok": False, "kind": "load" if request["op"] == "load" else "contract", "error": describe(e)}
        try:
            data = json.dumps(reply).encode()
        except (TypeError, ValueError) as e:
            data = json.dumps({"ok": False, "kind": "contract", "error": f"unserialisable reply: {e}"}).encode()
        except MemoryError:  # e.g. a 100 MB observation in a small memory limit
            data = json.dumps({"ok": False, "kind": "output", "error": "the reply is too large to serialise"}).encode()
        if len(data) > MAX_REPLY_BYTES:
            data = json.dumps({"ok": False, "kind": "output",
                               "error": f"reply of {len(data)} bytes exceeds the {MAX_REPLY_BYTES}-byte cap"}).encode()
        sock.sendall(struct.pack(">I", len(data)) + data)


def _load(request, max_turns):
    cls = load_env_class(request["code"])
    return construct(cls, max_turns), getattr(cls, "__name__", "?")


def _set_cpu_limit(timeout_s):
    import resource
    used = resource.getrusage(resource.RUSAGE_SELF)
    budget = int(used.ru_utime + used.ru_stime + timeout_s) + 2   # above the parent's deadline
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (min(budget, hard), hard))


def _recv(sock, deadline, limit=MAX_REPLY_BYTES + 4096):
    """One framed JSON message. Raises TimeoutError past `deadline` (time.monotonic()),
    EOFError when the peer is gone, ValueError for an oversized or malformed frame."""
    buffer, size = bytearray(), None
    while size is None or len(buffer) < 4 + size:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([sock], [], [], min(remaining, 3600))[0]:
            raise TimeoutError
        chunk = sock.recv(1 << 20 if size is None else min(4 + size - len(buffer), 1 << 20))
        if not chunk:
            raise EOFError
        buffer += chunk
        if size is None and len(buffer) >= 4:
            (size,) = struct.unpack(">I", buffer[:4])
            if size > limit:
                raise ValueError(f"a reply of {size} bytes exceeds the {MAX_REPLY_BYTES}-byte cap")
    return json.loads(bytes(buffer[4:]))


# ---------------------------------------------------------------------------------------------
# The zygote: a warm interpreter that forks one isolated child per sandbox.
# ---------------------------------------------------------------------------------------------
def _zygote_main(control_fd):
    """Serve spawn/reap requests from the trainer until its socket closes."""
    for name in PRELOAD:
        __import__(name)
    import encodings, pkgutil
    for codec in pkgutil.iter_modules(encodings.__path__):
        try:
            __import__(f"encodings.{codec.name}")
        except ImportError:  # mbcs, oem: Windows only
            pass
    isolation = isolate_zygote()
    control = socket.socket(fileno=control_fd)
    children = {}                                     # pid -> working directory
    control.send(json.dumps({"isolation": isolation}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 65536, 1)
        except OSError:
            message = b""
        if not message:                               # the trainer is gone: take everything down
            for pid in children:
                _kill_group(pid)
            os._exit(0)
        request = json.loads(message)
        if request["op"] == "spawn":
            workdir = tempfile.mkdtemp(prefix="spade-env-")
            pid = os.fork()
            if pid == 0:
                control.close()
                child = socket.socket(fileno=fds[0])
                try:
                    confine_child(request["uid"], request["memory_mb"], workdir, isolation)
                    _serve(child, request["max_turns"])
                finally:
                    os._exit(70)
            os.close(fds[0])
            children[pid] = workdir
            control.send(json.dumps({"pid": pid}).encode())
        elif request["op"] == "reap":
            pid = request["pid"]
            _kill_group(pid)
            _, status = os.waitpid(pid, 0)
            shutil.rmtree(children.pop(pid), ignore_errors=True)
            control.send(json.dumps({"status": status}).encode())


def _kill_group(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def sandbox_uid(number: int) -> int:
    """The uid of a process's `number`th sandbox, from 100000 on. The ranks of a multi-GPU run each
    have a range of their own, so that a sandbox cannot signal another rank's sandboxes either.

    >>> sandbox_uid(0), sandbox_uid(60_001)
    (100000, 100001)
    """
    rank, ranks = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    span = 60_000 // max(ranks, 1)
    return 100_000 + rank * span + number % span


class _Zygote:
    """The trainer's handle on its fork server (one per trainer process, started lazily)."""
    _instance, _lock = None, threading.Lock()
    _uids = itertools.count()

    def __init__(self):
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # one fd per live sandbox
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), "--zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL, cwd="/")
        theirs.close()
        self.control, self.owner = ours, os.getpid()
        self.isolation = json.loads(self._reply(timeout=60))["isolation"]

    @classmethod
    def get(cls):
        with cls._lock:
            z = cls._instance
            if z is None or z.owner != os.getpid() or z.process.poll() is not None:
                cls._instance = z = cls()
            return z

    def _reply(self, timeout=30):
        if not select.select([self.control], [], [], timeout)[0]:
            raise RuntimeError("the sandbox fork server did not answer")
        data = self.control.recv(65536)
        if not data:
            raise RuntimeError(f"the sandbox fork server died (exit code {self.process.poll()})")
        return data

    def spawn(self, child_end, memory_mb, max_turns):
        uid = sandbox_uid(next(self._uids))          # a uid per sandbox: they cannot signal each other
        request = {"op": "spawn", "uid": uid, "memory_mb": memory_mb, "max_turns": max_turns}
        with self._lock:
            socket.send_fds(self.control, [json.dumps(request).encode()], [child_end.fileno()])
            return json.loads(self._reply())["pid"]

    def reap(self, pid):
        with self._lock:
            self.control.send(json.dumps({"op": "reap", "pid": pid}).encode())
            return json.loads(self._reply())["status"]


def isolation():
    """How children are cut off from the network here (starts the fork server if needed)."""
    return _Zygote.get().isolation


class EnvSandbox:
    """One environment instance in its own isolated child process, for one episode."""

    def __init__(self, code, *, timeout_s=30.0, memory_mb=1024, max_turns=PLAY_MAX_TURNS):
        self.timeout_s, self.pid, self.alive, self.class_name = timeout_s, None, False, None
        ours, theirs = socket.socketpair()
        try:
            self._zygote = _Zygote.get()
            self.pid = self._zygote.spawn(theirs, memory_mb, max_turns)
        finally:
            theirs.close()
        self._sock, self.alive = ours, True
        if code is not None:
            self.class_name = self._call("load", code=code)

    def _call(self, op, **request):
        """Send one request; return its value or raise SandboxError (killing the child)."""
        if not self.alive:
            raise SandboxError("crash", "this sandbox is closed (it failed before, or close() was called)")
        timeout_s = request.pop("timeout_s", self.timeout_s)
        try:
            self._sock.sendall(_frame({"op": op, "timeout_s": timeout_s, **request}))
            reply = _recv(self._sock, time.monotonic() + timeout_s)
        except TimeoutError:
            self._fail("timeout", f"{op} did not finish within {timeout_s:g} s")
        except (EOFError, ConnectionError):
            status = self._shutdown()
            self._fail(*_death_reason(status, op))
        except ValueError as e:                                     # oversized or malformed frame
            self._fail("output", f"{op}: {e}")
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self._fail("output", f"{op}: malformed reply from the child")
        if not reply["ok"]:
            kind = reply.get("kind") if reply.get("kind") in KINDS else "output"
            self._fail(kind, str(reply.get("error", ""))[:MAX_ERROR_CHARS])
        return reply.get("value")

    def _fail(self, kind, message):
        self._shutdown()
        raise SandboxError(kind, message)

    def _shutdown(self):
        """Kill the child's process group, reap it (no zombies), remove its directory."""
        status = None
        if self.pid is not None and self.alive:
            self.alive = False
            self._sock.close()
            try:
                status = self._zygote.reap(self.pid)
            except (RuntimeError, OSError):
                _kill_group(self.pid)  # the fork server died: its children died with it
        return status

    def reset(self, seed=None):
        obs, info = self._call("reset", seed=seed)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self._call("step", action=str(action)[:MAX_ACTION_CHARS])
        return obs, reward, terminated, truncated, info

    def tools(self):
        return self._call("tools")

    def call_tool(self, name, arguments):
        return self._call("call_tool", name=str(name), arguments=arguments if isinstance(arguments, dict) else {})

    def close(self):
        self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "alive", False):
            self.close()


def _frame(message):
    data = json.dumps(message).encode()
    return struct.pack(">I", len(data)) + data


def _death_reason(status, op):
    """Why the child died without replying: (kind, message) from its wait status."""
    if status is None:
        return "crash", f"the environment process died during {op}"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "timeout", f"{op} exceeded its CPU time limit"
        return "crash", f"the environment process was killed by {signal.Signals(sig).name} during {op}"
    return "crash", f"the environment process exited with status {os.WEXITSTATUS(status)} during {op}"


@dataclass
class Validation:
    ok: bool
    stage: str          # "passed", or where it failed: syntax exec class construct interface reset
    error: str          # step reseed determinism criteria timeout memory crash output runtime
    class_name: str
    code: str           # after extraction and brace repair


def validate_env(code, *, timeout_s=60.0, memory_mb=1024):
    """The designer's gate: extraction, repair, then METHOD.md 3.1 in a sandbox (plus determinism)."""
    code = repair_braces(extract_code(code))
    try:
        ast.parse(code)
    except SyntaxError as e:
        return Validation(False, "syntax", f"SyntaxError: {e.msg} (line {e.lineno})", "", code)
    try:
        with EnvSandbox(None, timeout_s=timeout_s, memory_mb=memory_mb) as box:
            name = box._call("validate", code=code, timeout_s=timeout_s)
        return Validation(True, "passed", "", name, code)
    except SandboxError as e:
        if e.kind == "contract":
            try:
                stage, message = json.loads(e.message)
                return Validation(False, stage, message, "", code)
            except (ValueError, TypeError):
                return Validation(False, "runtime", e.message, "", code)
        return Validation(False, e.kind, e.message, "", code)


if __name__ == "__main__" and sys.argv[1:2] == ["--zygote"]:
    _zygote_main(int(sys.argv[2]))
