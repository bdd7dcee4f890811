"""The fork server: a warm interpreter, jailed by bubblewrap, that forks one confined child per sandbox;
the child's request loop; and the wire both sides speak.

EnvSandbox starts it once per trainer process (`python -m sandbox`, its control socket on stdin,
which brings the config first) and talks to it there; the trainer uses nothing here but the wire
functions. The fork server imports PRELOAD, finds out which isolation layers work here (a throwaway
child tries each one), then forks a child per spawn request: in a PID namespace of its own, confined
by confine.confine_child, serving its socket pair with environment code of METHOD.md 1 (contract.py)
until it is reaped. A child serves from `main`, after `serve` has returned there: none of the fork
server's state (its config, the request, the siblings it knows of) is left in the child to read.
"""
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import time
from contextlib import suppress

from sandbox import confine
from sandbox.contract import (ContractError, ToolUseBaseEnv, construct, criteria_at, describe, load_env_class, play_reset,
                      play_step, unboxed_probes)

MAX_REPLY_BYTES = 1 << 20          # observation + info, per reply
CHILD_FD = 3                       # a child's socket to the trainer
MAX_REQUEST_BYTES = 16 << 20      # code or an action, to the child (which trusts the trainer)
LEFT_CHARGE_BYTES = 16 << 20      # what a slot's memory cgroup may still hold when reused (`_reaped`)

# Imported by the fork server before any child exists, so that a child does not pay for them: METHOD
# 1.1's namespace and what its names need, every codec (`codecs.encode(s, "rot13")` looks its module up
# by name), and what environment code commonly imports. Anything else imports as in the trainer.
PRELOAD = """__future__ abc array base64 bisect calendar cmath codecs collections collections.abc colorsys
copy csv dataclasses datetime decimal difflib enum fractions functools graphlib hashlib heapq html io
ipaddress itertools json logging math numbers operator pathlib pprint queue random re secrets shlex
statistics string struct textwrap time traceback types typing unicodedata urllib.parse uuid warnings
weakref zlib zoneinfo _strptime numpy numpy.random""".split()


# ---------------------------------------------------------------------------------------------
# The wire: a 4-byte length, then JSON (never pickle: the parent must not unpickle what untrusted code
# wrote). The parent reads at most a capped frame, under the call's deadline, and accepts only strict JSON.
# ---------------------------------------------------------------------------------------------
def readable(sock, timeout=None):
    """Whether `sock` has data (or EOF) within `timeout` seconds (None: however long it takes); poll,
    so any fd number works."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, timeout) * 1000))


def send(sock, message, deadline):
    """`message` as one frame, or TimeoutError at `deadline`: a child that stops reading cannot hold us.
    A peer that shut its reading side is BrokenPipeError, never SIGPIPE (MSG_NOSIGNAL), whatever the
    process does with that signal."""
    data = json.dumps(message).encode()
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    sock.settimeout(remaining)
    try:
        sock.sendall(struct.pack(">I", len(data)) + data, socket.MSG_NOSIGNAL)
    finally:
        sock.settimeout(None)


def recv(sock, deadline, limit=MAX_REPLY_BYTES + 4096):
    """One frame's bytes. TimeoutError past `deadline` (time.monotonic()), EOFError when the peer is
    gone, ValueError for an oversized frame. Every read is non-blocking: poll can call a socket readable
    that a blocking recv would then wait on forever (an urgent byte that it skips)."""
    buffer, size = bytearray(), None
    while size is None or len(buffer) < 4 + size:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not readable(sock, None if deadline == float("inf") else remaining):
            raise TimeoutError
        try:
            chunk = sock.recv(1 << 20 if size is None else min(4 + size - len(buffer), 1 << 20), socket.MSG_DONTWAIT)
        except BlockingIOError:
            continue
        if not chunk:
            raise EOFError
        buffer += chunk
        if size is None and len(buffer) >= 4:
            (size,) = struct.unpack(">I", buffer[:4])
            if size > limit:
                raise ValueError(f"a frame of {size} bytes exceeds the {limit}-byte cap")
    return bytes(buffer[4:])


def strict_json(data):
    """json.loads without NaN/Infinity; trailing data, bad UTF-8, deep nesting and 5000-digit ints raise."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(data, parse_constant=refuse)


# ---------------------------------------------------------------------------------------------
# Child side: what runs inside the forked, confined process.
# ---------------------------------------------------------------------------------------------
def operations():
    """What a child does with environment code, by request name: request -> a JSON value. Its state
    is the class and the instances made so far (instance 0 is a play's; the gate makes more)."""
    cls, envs = None, []

    def load(request):
        nonlocal cls
        cls = load_env_class(request["code"])
        if cls is None:
            return {"class": None}
        if request.get("max_turns"):   # a play: its instance, constructed as at play time
            _, missing = new(request)
            if missing:
                raise ContractError("load", f"the environment has no {missing[0]}() method")
        return {"class": str(getattr(cls, "__name__", "?")),
                "tool_use": isinstance(cls, type) and issubclass(cls, ToolUseBaseEnv)}

    def new(request):   # the gate's construction, or a play's (max_turns): [index, the methods it lacks]
        envs.append(construct(cls, request.get("max_turns")))
        return [len(envs) - 1, [m for m in ("reset", "step") if not callable(getattr(envs[-1], m, None))]]

    return {
        "load": load,
        "construct": new,
        "reset": lambda r: play_reset(envs[r.get("env", 0)], r.get("seed")),
        "step": lambda r: play_step(envs[r.get("env", 0)], r["action"]),
        "tools": lambda r: envs[0].get_tools() if hasattr(envs[0], "get_tools") else [],
        "call_tool": lambda r: str(envs[0].execute_tool(r["name"], r["arguments"]).get("output", "")),
        "probe": lambda r: unboxed_probes(cls),
        "criteria": lambda r: criteria_at(cls, r["seed"]),
    }


def _serve(sock):
    """The child's request loop: one request in, one reply out, until the parent kills us. Requests
    come from the trainer and may be large (an action of 100k astral characters is 1.2 MB as JSON)."""
    handlers = operations()
    reserve = bytearray(1 << 20)  # released on MemoryError so that the reply can be built
    while True:
        request = json.loads(recv(sock, float("inf"), limit=MAX_REQUEST_BYTES))
        reserve = reserve or bytearray(1 << 20)
        try:
            reply = {"ok": True, "value": handlers[request["op"]](request)}
        except ContractError as e:
            reply = {"ok": False, "kind": e.kind, "error": str(e)}
        except MemoryError:
            reserve = None
            reply = {"ok": False, "kind": "memory", "error": "the environment ran out of memory (RLIMIT_AS)"}
        except BaseException as e:  # SystemExit, KeyboardInterrupt, ... raised by environment code
            reply = {"ok": False, "kind": "load" if request["op"] == "load" else "contract", "error": describe(e)}
        try:
            data = json.dumps({"id": request["id"], **reply}).encode()
        except (TypeError, ValueError, RecursionError) as e:
            data = _error_frame(request, "contract", f"unserialisable reply: {str(e)[:200]}")
        except MemoryError:  # e.g. a 100 MB observation in a small memory limit
            data = _error_frame(request, "output", "the reply is too large to serialise")
        if len(data) > MAX_REPLY_BYTES:
            data = _error_frame(request, "output", f"reply of {len(data)} bytes exceeds the {MAX_REPLY_BYTES}-byte cap")
        sock.sendall(struct.pack(">I", len(data)) + data)


def _error_frame(request, kind, error):
    return json.dumps({"id": request["id"], "ok": False, "kind": kind, "error": error}).encode()


# ---------------------------------------------------------------------------------------------
# The fork server: a warm interpreter in the jail that forks one confined child per sandbox.
# ---------------------------------------------------------------------------------------------
def main():
    """`python -m sandbox`: the fork server, and in each child it forks the request loop, from here."""
    control = socket.socket(fileno=0)
    fd = serve(control)
    control.detach()   # in the child, whose fd 0 is /dev/null by now
    try:
        _serve(socket.socket(fileno=fd))
    finally:
        os._exit(70)


def serve(control):
    """Read the config, find which layers work here, then serve spawn/reap requests (each reply carrying
    its request's id) until the trainer's socket closes. Returns only in a forked child: its socket's fd."""
    config = json.loads(control.recv(1 << 20))
    sys.path[:] = list(dict.fromkeys(config["path"]))   # the project, then the trainer's sys.path
    for name in PRELOAD:
        __import__(name)
    import encodings, pkgutil
    for codec in pkgutil.iter_modules(encodings.__path__):
        with suppress(ImportError):  # mbcs, oem: Windows only
            __import__(f"encodings.{codec.name}")
    gc.freeze()   # the collector never touches these objects, so a child does not copy their pages (~4 ms)
    pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY)   # ours, which each fork leaves for its own
    layers, report = _probe(config, pid_namespace)
    control.send(json.dumps({"isolation": report}).encode())
    children = {}                                     # pid -> its spec
    while True:
        message = b""
        with suppress(OSError):
            message, fds, _, _ = socket.recv_fds(control, 65536, 1)
        if not message:                               # the trainer is gone: take everything down
            for pid, spec in children.items():
                _reap(pid, spec)
            if config["cgroup"]:   # its slots, and itself unless the jail binds it (the trainer then removes it)
                confine.remove_cgroup(config["cgroup"])
            os._exit(0)
        request = json.loads(message)
        if request["op"] == "spawn":
            try:   # fork fails when the machine is out of memory or processes: that sandbox fails, not us
                spec = _spec(layers, config, request)
                pid = _fork(spec, fds[0], pid_namespace)
                if pid == 0:
                    return CHILD_FD
                children[pid] = spec
                reply = {"pid": pid}
            except OSError as e:
                reply = {"error": f"the fork server could not start a child: {e}"}
            os.close(fds[0])
        elif request["op"] == "reap" and request["pid"] in children:
            reply = _reaped(request["pid"], children.pop(request["pid"]))
        else:
            reply = {"error": f"no such request: {request}"}
        control.send(json.dumps({"id": request["id"], **reply}).encode())


def _reaped(pid, spec):
    """Reap a child for the trainer: its wait status and whether its memory cgroup killed it."""
    status = _reap(pid, spec)
    oom = bool(spec["cgroup"]) and confine.oom_kills(spec["cgroup"]) > spec["oom_kills"]
    # A dead child's SysV IPC namespace is freed by the kernel later, its memory charged to the slot until
    # then: a slot left holding more than page cache is not reused (rmdir hands its charges on), lest the
    # next child start with less than its limit. That child makes the slot's cgroup anew.
    if spec["cgroup"] and confine.charged(spec["cgroup"]) > LEFT_CHARGE_BYTES:
        with suppress(OSError):
            os.rmdir(spec["cgroup"])
    return {"status": status, "oom": oom}


def _spec(layers, config, request):
    """What confine_child does for one child: the layers that work, its uid, limits and places."""
    pages, resident = map(int, open("/proc/self/statm").read().split()[:2])
    page, memory = os.sysconf("SC_PAGE_SIZE"), request["memory_mb"] * 2**20
    cgroup = layers["cgroup"] and os.path.join(config["cgroup"], str(request["slot"]))   # one per slot, reused
    return {**layers, "uid": request["uid"] if layers["setuid"] else os.getuid(), "memory_mb": request["memory_mb"],
            # RLIMIT_AS counts the fork server's mappings the child starts with; the cgroup only the pages
            # the child itself makes, which at worst are copies of all those it shares with us.
            "address_space": pages * page + memory, "memory_limit": resident * page + memory,
            "cgroup": cgroup, "oom_kills": confine.oom_kills(cgroup) if cgroup else 0, "rebound": config["rebound"],
            "workdir": "/tmp" if layers["namespaces"] else tempfile.mkdtemp(prefix="spade-env-")}


def _fork(spec, sock_fd, pid_namespace, trial=False):
    """Fork one child (pid 1 of a PID namespace of its own when the spec has namespaces; the fork server
    returns to its own, `pid_namespace`) and confine it: its pid here, and 0 in the child, which has its
    socket on CHILD_FD and says b"\\x00" there when it is ready (a trial's then exits), or b"\\x01" and
    why it could not be confined, and exits."""
    if spec["namespaces"]:
        confine.check(confine.libc.unshare(confine.CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(sock_fd, CHILD_FD)
            os.closerange(CHILD_FD + 1, os.sysconf("SC_OPEN_MAX"))   # the fork server's own among them
            sock = socket.socket(fileno=CHILD_FD)
            try:
                confine.confine_child(spec)
            except BaseException as e:
                sock.sendall(b"\x01" + describe(e).encode()[:4000])
                os._exit(71)
            sock.sendall(b"\x00")
            sock.detach()
        except BaseException:
            os._exit(70)
        if trial:
            os._exit(0)
        return 0
    if spec["namespaces"]:                            # the next child gets a new one again
        confine.check(confine.libc.setns(pid_namespace, confine.CLONE_NEWPID), "setns(CLONE_NEWPID)")
    return pid


def _reap(pid, spec):
    """Kill a child (as pid 1 of its namespace it takes that with it), wait for it, clean up; its status."""
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if spec["workdir"] != "/tmp":
        _remove_tree(spec["workdir"])
    return status


def _probe(config, pid_namespace):
    """Try each layer in a throwaway child, then all that work together; return (the layers that
    work, a line on each for isolation()). All together failing is an error: no child would start."""
    # userns: where each child has a uid of its own, a user namespace in which every child reads the same
    layers = {"namespaces": True, "cgroup": bool(config["cgroup"]), "setuid": config["uid"] is not None,
              "userns": config["uid"] is not None, "seccomp": confine.ARCH is not None}
    errors = {}
    for layer in [name for name, on in layers.items() if on]:   # userns with the uids it maps
        trial = {name: name == layer or (layer, name) == ("userns", "setuid") for name in layers}
        errors[layer] = _trial(trial, config, pid_namespace)
        layers[layer] = errors[layer] is None
    together = _trial(layers, config, pid_namespace)
    if together is not None:
        raise RuntimeError(f"the sandbox's layers fail together: {together}")
    def line(layer, working, missing):
        return working if layers[layer] else f"missing: {errors.get(layer) or missing}"
    seen = f", which every sandbox reads as {confine.SEEN_UID}" if layers["userns"] else ""
    report = {
        "namespaces": line("namespaces", "mount, IPC, network, UTS, PID and cgroup namespaces of its own", "?"),
        "memory": line("cgroup", f"a memory cgroup of its own ({config['cgroup_note']})", config["cgroup_note"]),
        "uid": line("setuid", "a uid of its own, unique on the machine" + seen,
                    "the trainer is not root, so every sandbox runs as its uid"),
        "syscalls": line("seccomp", "a seccomp filter and a fresh session keyring",
                         "no filter is written for this CPU architecture"),
    }
    if layers["setuid"] and not layers["userns"]:   # each reads its own uid, which tells its slot
        report["same uid"] = f"missing: {errors['userns']}"
    return layers, report


def _trial(layers, config, pid_namespace):
    """None if a child confines itself with these layers, else why not."""
    spec = _spec(layers, config, {"uid": config["uid"], "slot": "trial", "memory_mb": 256})
    ours, theirs = socket.socketpair()
    with ours:
        with theirs:   # closed once forked, so that a trial child's death reads as the end of `ours`
            try:
                pid = _fork(spec, theirs.fileno(), pid_namespace, trial=True)
            except OSError as e:
                return str(e)
        answer = b""
        with suppress(OSError):
            ours.settimeout(30)
            answer = ours.recv(4096)
    _reap(pid, spec)
    return None if answer[:1] == b"\x00" else answer[1:].decode(errors="replace") or "the trial child died"


def _remove_tree(path):
    """rm -rf without recursion (a child may leave a chain 100k deep) and through read-only dirs: each
    directory opened up and emptied of its files, top-down, then the directories removed, bottom-up."""
    directories, stack = [], [path]
    while stack:
        top = stack.pop()
        directories.append(top)
        with suppress(OSError):
            os.chmod(top, 0o700)
            for entry in os.scandir(top):
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    with suppress(OSError):
                        os.unlink(entry.path)
    for directory in reversed(directories):   # each after every directory below it
        with suppress(OSError):
            os.rmdir(directory)
