"""The only place model-written environment code runs.

An environment is Python written by a model that is being trained. It may loop forever, allocate
50 GB, fork, open sockets, write files, read secrets, print megabytes, lie in its replies, return
garbage or crash the interpreter. The trainer must survive all of it, so environment code never runs
in the trainer:

    with EnvSandbox(code, timeout_s=30.0, memory_mb=1024) as env:   # one instance, one child process
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("\\boxed{open}")

What environment code must look like, and what a reply may hold, is contract.py (METHOD.md 1); the
designer's gate that runs through this is gate.py. How: a fork server (forkserver.py), started once
per trainer process inside a bubblewrap jail, has imported what environments commonly use; each
EnvSandbox has it fork one child, which confines itself (confine.py) and serves requests over a
socket pair: 4-byte length + JSON, never pickle. Forking a warm interpreter costs milliseconds, not
the ~200 ms of a new one (bench/sandbox_bench.py).

What each child gets (protected against):
- time: a deadline per call, enforced by the parent on what it sends as well as on the reply; past
  it the child is SIGKILLed, and as pid 1 of its own PID namespace it takes everything with it. Every
  read of its socket is non-blocking under that deadline, and an urgent (MSG_OOB) byte is read as any
  other, so nothing the child writes, or leaves unwritten, holds a call past it. Between calls the
  child is stopped (SIGSTOP), so it computes nothing while no call is in flight.
- memory: RLIMIT_AS (the fork server's mappings + memory_mb) gives a MemoryError; a memory cgroup of
  its own (cgroup v1, or v2 where the memory controller is delegated) also counts what RLIMIT_AS misses
  (memfd, SysV shared memory and queues, its tmpfs) and kills it past the limit ("memory"); its
  oom_score_adj is 1000, so the machine's OOM killer takes sandboxes before the trainer. It sees no
  cgroup file, with a memory cgroup or without (/sys/fs/cgroup is empty for it): a slot's peak and
  fault counters, which outlive a child, and the usage of the sandboxes beside it carry nothing from
  one to another. A slot whose last child left more than page cache charged (SysV objects, which the
  kernel frees some time after the child) gets a new cgroup, so the next child has its whole limit.
- processes: RLIMIT_NPROC 0 (no fork, subprocess, os.system or threads, for any child that is not
  real root) and seccomp's refusal of clone3 and of user-namespace clones; a PID namespace of its own,
  so it sees and can signal no other process: not the trainer, the fork server or another sandbox.
- machine-wide kernel quotas: no AIO context (io_setup refused: fs.aio-max-nr is the machine's, and the
  trainer's own AIO would lack it) and no pty (no devpts: kernel.pty.max), not even while stopped.
- files: a read-only view of the host in which /home, /root, /run, /tmp and /var/tmp are empty,
  read-only tmpfs, but for the interpreter's, the project's and the trainer's sys.path directories
  (read-only, so imports work as in the trainer, also from a project or venv under /tmp or a 0700
  home; never one of those five whole); the default run directories (out/ in the project and where
  the trainer started, if there when the fork server starts) are empty too, and a run directory is
  0700 (harness/checkpoint.claim), which a child with a uid of its own cannot enter; one writable
  place, a private 64 MiB tmpfs on /tmp (also /dev/shm, its cwd and HOME) that vanishes with it;
  RLIMIT_FSIZE 64 MiB, RLIMIT_NOFILE 256 (16 MiB and 64 without a memory cgroup, which bounds
  memfds); a read-only /dev of null, zero, full, random, urandom, tty, shm and the fd links (ptmx
  leads nowhere): no /dev/nvidia*, no /dev/dri, so no GPU memory beside the trainer's.
- network and IPC: network, IPC and UTS namespaces of its own (no interfaces; SysV objects and POSIX
  queues die with it), and socket() refused by a seccomp filter, so not even a unix socket on the
  host can be reached.
- identity: a uid of its own, unique among the fork servers that share /run (when the trainer is
  root), which every child reads as the same one (SEEN_UID, through a user namespace of its own), no
  capabilities and an empty bounding set, NO_NEW_PRIVS (setuid binaries give nothing), not dumpable, a
  fresh empty session keyring (keyctl refused), an environment with only PATH, HOME, TMPDIR, USER and
  LOGNAME ("sandbox") and one thread for OpenMP and BLAS, stdio on /dev/null. Nothing tells a child its
  slot or its trainer: a cgroup namespace (its cgroup path reads "/"), no cgroup file system in its
  mount table, one command line for every fork server (its config comes over its socket), and none of
  the fork server's state (config, requests, the siblings it knows of: the child serves from a stack
  the fork server's frames have left).
- what comes back: the parent reads at most one capped frame per call, as strict JSON (no NaN, no
  trailing data), checks the request id, that nothing arrived between calls and every type (a str
  observation with lone surrogates replaced, a finite float reward, where an exact integer too large
  for a float is refused too, bool flags, a flat JSON info, tool schemas at most 32 deep). Any of it
  wrong is SandboxError("output"), never another exception; its message, which may quote the
  environment, has its control and bidirectional characters escaped (`printable`), for the terminal,
  the log and the report. A play's step() clips the reward to the gate's range, REWARD_RANGE: the gate
  probes three actions, a play may meet any reward. The agent cuts what can no longer fit a play's
  context before it is tokenised or kept, tool calls included (chat.chars_per_token).
- the parent's sends: MSG_NOSIGNAL, so a child that shuts its socket's reading side is an error, never
  SIGPIPE, whatever the process embedding the trainer does with that signal.
- the gate's two processes (gate.py) start side by side, each in a slot of its own, as a game's plays
  do, so what the kernel numbers per process (its /tmp's device, its mount ids) differs between them
  as between plays; the second loads the code only once the first is gone, so the first cannot hand
  it a value (a lock on a readable host file, say) that its determinism check then compares.
- the fork server survives whatever a child leaves behind (its files go with its mount namespace);
  its children die with it, however it dies: it is the jail's pid 1, and a child's PR_SET_PDEATHSIG
  cannot be cleared (seccomp); it exits when the trainer's socket closes, so nothing a sandbox started
  outlives a trainer that is SIGKILLed; one that stops answering for 30 s is killed and started again.

What it does NOT protect against: kernel exploits (the seccomp filter is a short deny list, not an
allow list; gVisor is the tool for that); reading world-readable files of the host outside the
emptied directories (/etc, /usr, this project's code, ...); CPU side channels, and other channels
through what sandboxes share on the machine: the page cache (which pages of a host file another one
read, told by timing), CPU load, /proc/meminfo and /proc/loadavg (the machine's process count, its
siblings among them), and locks on readable host files between sandboxes alive at the same time (a
game's plays run side by side; the gate's two processes never run code together); numbers the kernel
gives each process (device numbers, mount and namespace ids: they differ between any two sandboxes,
so a game drawn from them fails the determinism check, unless it draws from a coarse function of them
that happens to agree for the gate's two processes); the fork server's heap as it was at the fork
(freed memory, which may still hold the bytes of earlier requests, read by scanning it); using
a CPU fully for up to the deadline of each call; kernel quotas other than AIO and ptys beyond what the
child's rlimits, memory cgroup and uid bound; a run directory given with --out outside out/ where the
uid layer is missing (its 0700 does not stop the trainer's own uid); an environment that replaces the
child's request loop with its own (it is the same process) and answers every request itself: the
gate can only judge what it answers, and its plays then go as it answers, type-checked like any
other. Where a layer is not available on a machine (no bubblewrap, no CAP_SYS_ADMIN, no memory
cgroup, not root, another CPU architecture), `isolation()` says which, a WARNING says so once at
start, `summary()` gives the run's header the same line, and the others still hold; without the jail,
the child also sees the host's /dev (its ptys among it) and, where the interpreter lives in a closed
home, cannot import what the fork server did not; where the jail, the namespaces and a uid of its own
are all missing, the sandbox refuses to start (environment code would run as the trainer's user,
beside it), unless SPADE_UNSAFE_SANDBOX=1. What the trainer itself reads from outside (a run directory
to resume, a pool folder, a corpus) is data by other means: the README's "What a run trusts".

Every failure raises SandboxError with .kind in {"load", "contract", "timeout", "memory",
"crash", "output"}; after it the child is dead and reaped and .alive is False. The agent ends the
episode with it: a scored -1 when step() raised or broke the contract (METHOD.md 1.1), otherwise a
FAILED play that is dropped (METHOD.md 3.3); nothing here hides it.
"""
import atexit
import functools
import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress

from sandbox import confine
from sandbox.contract import (MAX_ACTION_CHARS, MAX_ERROR_CHARS, PLAY_MAX_TURNS, REWARD_RANGE, ReplyError, checked_reset,
                              checked_step, checked_tools, clean_text, printable)
from sandbox.forkserver import readable, recv, send, strict_json

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # this package's parent, on sys.path
KINDS = ("load", "contract", "timeout", "memory", "crash", "output")

class SandboxError(Exception):
    """A failure of environment code or of its process. `.kind` is one of KINDS; `.message` is printable
    (what the environment wrote in it, an exception's text say, has its control characters escaped)."""

    def __init__(self, kind, message):
        assert kind in KINDS, kind
        message = printable(message)
        super().__init__(f"[{kind}] {message}")
        self.kind, self.message = kind, message


# ---------------------------------------------------------------------------------------------
# The trainer's side: its handle on the fork server, and one EnvSandbox per environment instance.
# ---------------------------------------------------------------------------------------------
class _Zygote:
    """The trainer's fork server (one per trainer process, started lazily), its uids and cgroup."""
    _instance, _starting = None, threading.Lock()

    def __init__(self):
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # two fds per live sandbox
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
        self.owner, self._slots, self._orphans, self.failure = os.getpid(), set(), [], ""
        self._lock, self._requests = threading.Lock(), itertools.count()
        self.uid_base = _uid_block(os.getpid())
        self.cgroup, cgroup_note = confine.memory_cgroup()   # made again after a close removed it
        visible = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, PROJECT, *sys.path,
                   os.path.dirname(os.path.realpath(sys.executable))]
        self._config = {"cgroup": self.cgroup, "cgroup_note": cgroup_note, "rebound": confine.rebound(visible),
                        "uid": self.uid_base and self.uid_base + confine.UID_BLOCK - 1,   # the trials' uid
                        "path": [PROJECT] + [os.path.abspath(p) for p in sys.path if p]}   # imports as here
        # The default run directories (spade.py's --out, out/{time}, from the project or where it was started):
        # emptied, for a trainer whose sandboxes run as its own uid, which the run's 0700 does not stop.
        runs = [os.path.join(PROJECT, "out"), os.path.abspath("out")]
        prefix, jail = confine.jail(visible, [self.cgroup] if self.cgroup else [], runs)
        hello = prefix is not None and self._start(prefix)
        if not hello:   # no bubblewrap, or it cannot run here (no user namespaces, say): unjailed
            jail = f"missing: {jail if prefix is None else self.failure}"
            hello = self._start([])
        if not hello:
            raise RuntimeError(f"the sandbox fork server could not start: {self.failure}")
        self.isolation = {"jail": jail, **hello["isolation"]}
        missing = {layer: line.removeprefix("missing: ") for layer, line in self.isolation.items()
                   if line.startswith("missing: ")}
        if {"jail", "namespaces", "uid"} <= set(missing) and os.environ.get("SPADE_UNSAFE_SANDBOX") != "1":
            self.close()   # environment code would run as the trainer's user, beside it, seeing everything
            raise RuntimeError("the sandbox cannot isolate environment code here: " + "; ".join(
                f"{layer}: {why}" for layer, why in missing.items()) + ". Install bubblewrap, allow unprivileged "
                "user namespaces, or run as root; SPADE_UNSAFE_SANDBOX=1 runs it with rlimits and seccomp only")
        if missing:
            print("WARNING: the sandbox's isolation is partial here; missing: " + "; ".join(
                f"{layer} ({why})" for layer, why in missing.items()), file=sys.stderr, flush=True)

    def _start(self, prefix):
        """Run the fork server (behind `prefix`): its hello, or None when it died first (`self.failure`
        then says why). Slow is not broken: no hello within 60 s is an error, never a fallback."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.send(json.dumps(self._config).encode())   # its first message: not in its command line, which a child reads
        argv = [*prefix, sys.executable, "-u", "-m", "sandbox"]
        log = tempfile.TemporaryFile()
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "PYTHONPATH": PROJECT, **dict.fromkeys(confine.ONE_THREAD, "1")}
        self.process = subprocess.Popen(argv, env=env, stdin=theirs, stdout=log, stderr=log, cwd="/")
        theirs.close()
        self.control = ours
        if not readable(ours, 60):
            self.process.kill()
            raise RuntimeError("the sandbox fork server did not answer within 60 s")
        with suppress(ConnectionResetError):   # it died with its config unread
            if data := ours.recv(65536):
                return json.loads(data)
        log.seek(0)
        said = log.read().decode(errors="replace").strip().splitlines()
        self.failure = f"{os.path.basename(argv[0])}: {said[-1] if said else 'exited'}"
        self.process.wait()
        ours.close()
        return None

    @classmethod
    def get(cls):
        with cls._starting:
            z = cls._instance
            if z is None or z.owner != os.getpid() or z.process.poll() is not None:
                _close_ours()
                cls._instance = z = cls()
            return z

    def _exchange(self, message, fds=()):
        """One request and its reply (the caller holds the lock). No reply in 30 s, or one with another
        id, means the fork server is wedged: it is killed (its children die with it) and restarted."""
        number = next(self._requests)
        with suppress(OSError):
            socket.send_fds(self.control, [json.dumps({**message, "id": number}).encode()], list(fds), socket.MSG_NOSIGNAL)
            if readable(self.control, 30):
                reply = json.loads(self.control.recv(65536) or b"null")
                if type(reply) is dict and reply.get("id") == number:
                    return reply
        self.process.kill()
        raise RuntimeError(f"the sandbox fork server did not answer (exit code {self.process.poll()})")

    def spawn(self, child_end, memory_mb):
        """A new confined child that serves `child_end`: (its pid in the fork server, its slot)."""
        with self._lock:
            self._reap_orphans()
            # The lowest free slot: its memory cgroup is made once and reused (making one takes ms).
            slot = next(n for n in itertools.count() if n not in self._slots)
            uid = self.uid_base and self.uid_base + slot   # a uid per sandbox, unique on the machine
            reply = self._exchange({"op": "spawn", "slot": slot, "uid": uid, "memory_mb": memory_mb},
                                   [child_end.fileno()])
            if "error" in reply:
                raise RuntimeError(reply["error"])
            self._slots.add(slot)
            return reply["pid"], slot

    def reap(self, pid, slot):
        """Kill and reap a child: (its wait status, whether its memory cgroup killed it)."""
        with self._lock:
            self._reap_orphans()
            return self._reap(pid, slot)

    def orphan(self, pid, slot):
        """A sandbox collected without close() (EnvSandbox.__del__): reaped by the next request. No lock
        here, as the collector may run inside a locked request of this very thread."""
        self._orphans.append((pid, slot))

    def _reap_orphans(self):
        while self._orphans:
            self._reap(*self._orphans.pop())

    def _reap(self, pid, slot):
        self._slots.discard(slot)   # free whether or not the fork server answers
        reply = self._exchange({"op": "reap", "pid": pid})
        return reply.get("status"), reply.get("oom")

    def close(self):
        """The fork server takes its children down (it sees its socket close), then the cgroup goes."""
        self.control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        if self.cgroup:
            confine.remove_cgroup(self.cgroup)


@atexit.register
def _close_ours():
    """Close this process's fork server, if it has one (one inherited through a fork is the parent's)."""
    zygote = _Zygote._instance
    if zygote is not None and zygote.owner == os.getpid():
        zygote.close()


@functools.lru_cache(maxsize=None)
def _uid_block(pid):
    """The block of uids trainer process `pid` claims for its sandboxes, once even if its fork server is
    restarted (a process it forks claims its own); None when not root."""
    return confine.claim_uids()[1] if os.getuid() == 0 else None   # the lock's fd stays open


def summary():
    """isolation() in one line for a run's header: the layers that hold, then each missing one and why,
    as in "namespaces, memory, uid, syscalls; MISSING jail (bubblewrap is not installed ...)"."""
    layers = isolation()
    missing = [f"{k} ({v.removeprefix('missing: ')})" for k, v in layers.items() if v.startswith("missing: ")]
    held = ", ".join(k for k, v in layers.items() if not v.startswith("missing: "))
    return held + ("; MISSING " + "; ".join(missing) if missing else "")


def isolation():
    """What confines a sandbox here, layer by layer: {"jail", "namespaces", "memory", "uid",
    "syscalls"} -> a line each, "missing: why" where a layer is not available. Starts the fork server,
    and raises RuntimeError where it cannot start or could not isolate anything (see _Zygote)."""
    return dict(_Zygote.get().isolation)


class EnvSandbox:
    """One environment instance in its own confined child process, for one episode."""

    def __init__(self, code, *, timeout_s=30.0, memory_mb=1024, max_turns=PLAY_MAX_TURNS):
        self.timeout_s, self.pid, self.alive, self.class_name = timeout_s, None, False, None
        self._pidfd, self._requests, self._lock = None, itertools.count(), threading.RLock()
        ours, theirs = socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)   # the ready byte carries the child's pid
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)  # an urgent byte is read as any other
        try:
            self._zygote = _Zygote.get()
            self._server_pid, self._slot = self._zygote.spawn(theirs, memory_mb)
        except (RuntimeError, OSError) as e:   # the fork server died or could not fork (the next call restarts it)
            ours.close()
            raise SandboxError("crash", f"the sandbox could not start: {e}")
        finally:
            theirs.close()
        self._sock, self.alive = ours, True
        self._ready(time.monotonic() + timeout_s)
        if code is not None:
            loaded = self.request("load", code=code, max_turns=max_turns)
            if type(loaded) is not dict or loaded.get("class") is None:
                self._fail("load", "no class whose name ends in 'Env' was defined")
            self.class_name = self._checked(clean_text, loaded["class"])

    def _ready(self, deadline):
        """Wait for the child's ready byte; its credentials give its pid as we see it (the child is pid 1
        of its own namespace); a pidfd then signals exactly that process, never a reused pid."""
        try:
            if not readable(self._sock, deadline - time.monotonic()):
                self._fail("timeout", "the sandbox did not start in time")
            data, ancillary, _, _ = self._sock.recvmsg(4096, socket.CMSG_SPACE(12), socket.MSG_DONTWAIT)
        except OSError as e:
            self._fail("crash", f"the sandbox did not start: {e}")
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 0)
        pids = [struct.unpack("3i", d[:12])[0] for level, kind, d in ancillary
                if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS)]
        if data != b"\x00" or not pids or pids[0] <= 0:
            self._fail("crash", "the sandbox could not be set up: " + data[1:].decode(errors="replace"))
        self.pid = pids[0]
        with suppress(AttributeError, OSError):   # Linux < 5.3: signals go by pid
            self._pidfd = os.pidfd_open(self.pid)
        self._signal(signal.SIGSTOP)

    def _signal(self, number):
        """SIGSTOP after each reply and SIGCONT before each request: a child has no CPU between calls."""
        with self._lock, suppress(OSError):   # OSError: gone already
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, number)
            elif self.pid:
                os.kill(self.pid, number)

    def request(self, op, deadline=None, **fields):
        """Send one request (forkserver.operations), by `deadline` (else within timeout_s); return its
        value or raise SandboxError (killing the child)."""
        if not self.alive:
            raise SandboxError("crash", "this sandbox is closed (it failed before, or close() was called)")
        deadline = deadline or time.monotonic() + self.timeout_s
        number = next(self._requests)
        try:
            if readable(self._sock, 0):   # a frame nobody asked for (forged, or a desync), or its death
                # Its first byte, without blocking: a readable socket with nothing to read (an urgent byte a
                # recv would skip) counts as a byte; none at all is its end.
                with suppress(BlockingIOError):
                    if not self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                        raise EOFError
                self._fail("output", f"{op}: the environment wrote to its reply socket between calls")
            self._signal(signal.SIGCONT)
            send(self._sock, {"op": op, "id": number, **fields}, deadline)
            reply = strict_json(recv(self._sock, deadline))
            self._signal(signal.SIGSTOP)
        except TimeoutError:
            self._fail("timeout", f"{op} did not finish within {self.timeout_s:g} s")
        except (EOFError, ConnectionError):
            self._fail(*_death_reason(*self._shutdown(), op))
        except (ValueError, RecursionError) as e:   # oversized, malformed or too deeply nested
            self._fail("output", f"{op}: {str(e)[:200]}")
        if type(reply) is not dict or reply.get("id") != number or type(reply.get("ok")) is not bool:
            self._fail("output", f"{op}: malformed reply from the child")
        if not reply["ok"]:
            kind, error = reply.get("kind"), reply.get("error")
            self._fail(kind if kind in KINDS else "output", clean_text(error)[:MAX_ERROR_CHARS]
                       if type(error) is str else "malformed error")
        return reply.get("value")

    def _checked(self, check, value):
        try:
            return check(value)
        except ReplyError as e:
            self._fail("output", str(e))

    def _fail(self, kind, message):
        self._shutdown()
        raise SandboxError(kind, message)

    def _shutdown(self, reap=True):
        """Kill the child (and so its PID namespace), reap it (no zombies): (wait status, oom). Without
        `reap` (a sandbox collected without close()), the fork server's next request reaps it."""
        with self._lock:
            if not self.alive:
                return None, None
            self.alive = False
            self._signal(signal.SIGKILL)
            pidfd, self._pidfd = self._pidfd, None
        self._sock.close()
        if pidfd is not None:
            os.close(pidfd)
        if not reap:
            self._zygote.orphan(self._server_pid, self._slot)
            return None, None
        with suppress(RuntimeError, OSError):   # the fork server died: its children died with it (PR_SET_PDEATHSIG)
            return self._zygote.reap(self._server_pid, self._slot)
        return None, None

    def reset(self, seed=None):
        return self._checked(checked_reset, self.request("reset", seed=seed))[:2]   # less the kinds

    def step(self, action):
        """(observation, reward, terminated, truncated, info), the reward clipped to REWARD_RANGE: the gate
        probes only three actions, so a play may meet a reward it never saw (1e308 twice sums to inf)."""
        value = self.request("step", action=str(action)[:MAX_ACTION_CHARS])
        obs, reward, terminated, truncated, info = self._checked(checked_step, value)[:5]
        return obs, min(max(reward, REWARD_RANGE[0]), REWARD_RANGE[1]), terminated, truncated, info

    def tools(self):
        return self._checked(checked_tools, self.request("tools"))

    def call_tool(self, name, arguments):
        value = self.request("call_tool", name=str(name), arguments=arguments if isinstance(arguments, dict) else {})
        return self._checked(clean_text, value)

    def close(self):
        self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        """Collected without close(): kill it now, let the next request reap it (the fork server's lock
        is not taken here, as the collector may run inside a locked request of this very thread)."""
        if getattr(self, "alive", False):
            self._shutdown(reap=False)


def _death_reason(status, oom, op):
    """Why the child died without replying: (kind, message) from its wait status."""
    if oom:
        return "memory", f"the environment exceeded its memory limit during {op} (its memory cgroup killed it)"
    if status is None:
        return "crash", f"the environment process died during {op}"
    if os.WIFSIGNALED(status):
        try:
            name = signal.Signals(os.WTERMSIG(status)).name
        except ValueError:   # a real-time signal has no name
            name = f"signal {os.WTERMSIG(status)}"
        return "crash", f"the environment process was killed by {name} during {op}"
    return "crash", f"the environment process exited with status {os.WEXITSTATUS(status)} during {op}"
