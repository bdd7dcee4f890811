"""Adversarial tests of the sandbox's isolation: one attack per property, each judged from the
parent's side (the host's files, its memory, its IPC objects, its processes, the other sandboxes,
the next sandbox), never only from what the child says about itself.

The hostile code runs in the sandbox; the test process plays the trainer (it is root here). Helpers
come from test_sandbox.py: `env_code` builds an environment from snippets, `attack` runs it until a
call fails and checks kind, time, cleanup and recovery, `zygote_children` lists the fork server's
children.
"""
import ctypes
import json
import math
import os
import pathlib
import select
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

import sandbox
from gate import validate_env
from sandbox import EnvSandbox, SandboxError, confine, forkserver
from test_sandbox import (JAILED, TIMEOUT, _processes as processes, attack, env_code, fork_server_pid, need_jail,
                          zygote_children)
from test_sandbox import jail  # noqa: F401  (the fixture JAILED uses, found by pytest in this module)

ROOT = pathlib.Path(__file__).resolve().parent.parent
STEP_KINDS = ["str", "number", "bool", "bool", "dict"]
ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="the trainer is root on the machines these properties are for")

# Environment-side helpers, put at the top of an environment's module: the reply socket's fd (found
# the way hostile code would: the one SOCK_STREAM socket among its fds) and a raw frame writer.
WIRE = """
import socket as _socket, struct as _struct
def reply_fd():
    for fd in range(3, 64):
        try:
            s = _socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        kind = s.type
        s.close()
        if kind == _socket.SOCK_STREAM:
            return fd
    raise RuntimeError('no reply socket')
def write_raw(payload):
    data = _struct.pack('>I', len(payload)) + payload
    fd = reply_fd()
    while data:
        data = data[os.write(fd, data):]
def write_frame(message):
    write_raw(json.dumps(message).encode())
def read_frame():
    fd = reply_fd()
    def exactly(n):
        buf = b''
        while len(buf) < n:
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf
    return json.loads(exactly(_struct.unpack('>I', exactly(4))[0]))
"""


def wire_env(**snippets):
    top = snippets.pop("top", "")
    return env_code(top=WIRE + "\n" + textwrap.dedent(top), **snippets)


def gone(box, bystanders=()):
    """The child is dead and reaped, nothing else of the fork server's is left, a fresh one works."""
    assert not box.alive
    assert not os.path.exists(f"/proc/{box.pid}")
    assert set(zygote_children()) == set(bystanders)
    started = time.monotonic()
    with EnvSandbox(env_code()) as fresh:
        assert fresh.reset() == ("ready", {})
    assert time.monotonic() - started < 2


def refused(code, kinds=("output", "contract"), calls=lambda box: (box.reset(seed=0), box.step("\\boxed{go}"))):
    """`calls` on a sandbox of `code` raise SandboxError (never return a bad value); then cleanup."""
    box = None
    with pytest.raises(SandboxError) as caught:
        box = EnvSandbox(code, timeout_s=TIMEOUT, memory_mb=256)
        got = calls(box)
        pytest.fail(f"a value came back: {got!r:.300}")
    assert caught.value.kind in kinds, caught.value
    if box is not None:
        gone(box)
    return caught.value


def meminfo(field):
    for line in open("/proc/meminfo"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def sysvipc(name):
    """The host's SysV IPC objects of one kind (the lines of /proc/sysvipc/<name> after its header)."""
    return set(pathlib.Path(f"/proc/sysvipc/{name}").read_text().splitlines()[1:])


def settles(predicate, within=3.0):
    """True once `predicate()` holds (the kernel frees an IPC namespace after an RCU grace period)."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def cpu_ticks(pid):
    """utime + stime of `pid` (fields 14 and 15 of /proc/<pid>/stat), in clock ticks."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), fields[0]


def uid_of(pid):
    """The real uid of a host process as the host sees it."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])


def zygote_pid():
    return sandbox._Zygote.get().process.pid


def token():
    return uuid.uuid4().hex[:12]


# --- 1. what comes back is valid UTF-8 ------------------------------------------------------
@pytest.mark.parametrize("make, expected", [
    ("chr(0xD800)", "\ufffd"), ("chr(0xDFFF)", "\ufffd"), ("chr(random.randint(0xD800, 0xDFFF))", "\ufffd"),
    ("chr(0xDBFF) + 'A' + chr(0xDC00) + chr(0xDC00)", "\ufffdA\ufffd\ufffd"),
    ("chr(0xD83D) + chr(0xDE00)", None),   # a pair: JSON joins it into one valid character
])
def test_lone_surrogates_come_back_as_replacement_characters(make, expected):
    """A lone surrogate in the observation, an info value and an info key: the trainer gets a str that
    encodes as UTF-8, with U+FFFD where the surrogate was."""
    code = env_code(reset=f"s = {make}\nreturn 'start' + s, {{'k': s}}",
                    step=f"s = {make}\nreturn 'obs' + s, 0.0, False, False, {{'v' + s: 'x' + s}}")
    with EnvSandbox(code, timeout_s=5) as box:
        obs, info = box.reset(seed=0)
        obs2, _, _, _, info2 = box.step("go")
    for text in (obs, obs2, *info, *info.values(), *info2, *info2.values()):
        assert type(text) is str
        text.encode("utf-8")
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    if expected is not None:
        assert (obs, info) == ("start" + expected, {"k": expected})
        assert (obs2, info2) == ("obs" + expected, {"v" + expected: "x" + expected})


# --- 2. a child that stops reading cannot hold the parent's send -------------------------------
@pytest.mark.parametrize("char", ["é", "\u4e00", "\U0001F600"])
def test_large_action_to_a_child_that_stopped_reading(char):
    """The child answers step 1 itself, then sleeps inside it instead of reading: step 2's ~300k-char
    action (far more than a socket buffer once JSON-escaped) must fail as "timeout" within the deadline."""
    code = wire_env(step="""
        write_frame({'id': 2, 'ok': True, 'value': ['ok', 0.0, False, False, {}, %r]})
        time.sleep(60)""" % STEP_KINDS)
    box = EnvSandbox(code, timeout_s=TIMEOUT, memory_mb=256)
    box.reset(seed=0)
    assert box.step("\\boxed{go}")[0] == "ok"
    started = time.monotonic()
    with pytest.raises(SandboxError) as caught:
        box.step(char * 300_000)
    elapsed = time.monotonic() - started
    assert caught.value.kind == "timeout", caught.value
    assert elapsed < TIMEOUT + 2, f"took {elapsed:.1f} s"
    gone(box)


def test_dribbled_reply_is_a_timeout():
    """The child announces a 100-byte reply and then sends one byte every 0.2 s: the parent's read is
    under the call's deadline as a whole, not per byte."""
    code = wire_env(step="""
        fd = reply_fd()
        os.write(fd, (100).to_bytes(4, 'big'))
        for _ in range(200):
            os.write(fd, b' ')
            time.sleep(0.2)""")
    attack(code, "timeout")


@pytest.mark.parametrize("size", [2**32 - 1, (1 << 20) + 4097 + 4096])
def test_oversized_frame_header_is_refused(size):
    """A frame header claiming more than the reply cap: refused at once, nothing more is read."""
    attack(wire_env(step=f"os.write(reply_fd(), ({size}).to_bytes(4, 'big') + b'[')\ntime.sleep(5)"), "output")


# --- 3. deep nesting in a reply ----------------------------------------------------------------
@pytest.mark.parametrize("nest", ["[" * 100_000 + "]" * 100_000,
                                  '{"a":' * 100_000 + "1" + "}" * 100_000,
                                  '[{"a":' * 50_000 + "1" + "}]" * 50_000])
def test_deeply_nested_reply(nest):
    """The env writes its own well-framed reply whose value is nested 100k deep."""
    code = wire_env(step=f"write_raw(b'{{\"id\": 2, \"ok\": true, \"value\": ' + {nest!r}.encode() + b'}}')\n"
                         "time.sleep(5)")
    attack(code, "output")


def test_nested_tool_schema_is_refused():
    """tools() replying with a parameter schema nested 200 deep (the child can still serialise it)."""
    code = wire_env(top="""
        _orig = json.dumps
        def _forge(obj, *a, **k):
            if type(obj) is dict and obj.get('ok') is True and obj.get('value') == []:
                schema = {}
                for _ in range(100):
                    schema = {'type': 'object', 'properties': {'x': schema}}
                obj = {**obj, 'value': [{'type': 'function', 'function': {'name': 'f', 'parameters': schema}}]}
            return _orig(obj, *a, **k)
        json.dumps = _forge""")
    refused(code, kinds=("output",), calls=lambda box: (box.reset(), box.tools()))


# --- 4. memory that RLIMIT_AS does not see --------------------------------------------------
MEMFD = """
held, fds, chunk = 0, [], b'z' * (16 << 20)
try:
    while held < (512 << 20):          # many memfds of 16 MiB each: RLIMIT_FSIZE is per file
        fd = os.memfd_create('hoard')
        fds.append(fd)
        os.write(fd, chunk)
        held += len(chunk)
except OSError as e:
    return f'held {held >> 20} MiB, then {e}', 0.0, False, False, {}
self.fds = fds
return f'held {held >> 20} MiB', 0.0, False, False, {}
"""
SYSV_SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
held = 0
while held < (512 << 20):
    sid = libc.shmget(0, 16 << 20, 0o1666)            # IPC_PRIVATE | IPC_CREAT, world-readable
    if sid < 0:
        return f'held {held >> 20} MiB, then shmget errno {ctypes.get_errno()}', 0.0, False, False, {}
    addr = libc.shmat(sid, None, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        return f'held {held >> 20} MiB, then shmat errno {ctypes.get_errno()}', 0.0, False, False, {}
    ctypes.memset(addr, 1, 16 << 20)
    libc.shmdt(ctypes.c_void_p(addr))                 # detached: the segment outlives the mapping
    held += 16 << 20
return f'held {held >> 20} MiB', 0.0, False, False, {}
"""
SYSV_MSG = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(8 + 8000)
ctypes.memmove(buf, (1).to_bytes(8, 'little'), 8)
held = 0
for _ in range(32000):
    q = libc.msgget(0, 0o1666)
    if q < 0:
        return f'held {held >> 20} MiB, then msgget errno {ctypes.get_errno()}', 0.0, False, False, {}
    while libc.msgsnd(q, buf, 8000, 0o4000) == 0:    # IPC_NOWAIT, until the queue is full
        held += 8000
    if held >= (512 << 20):
        break
return f'held {held >> 20} MiB', 0.0, False, False, {}
"""


@pytest.mark.parametrize("hoard", [MEMFD, SYSV_SHM, SYSV_MSG], ids=["memfd", "sysv-shm", "sysv-msg"])
def test_memory_outside_the_address_space_limit(hoard):
    """memory_mb=128: 512 MiB of memfd pages, SysV shared memory or SysV messages must not be held (the
    child's memory cgroup kills it: kind "memory"); afterwards the host's Shmem is back, the host's SysV
    tables gained nothing, and the next sandbox in the same slot can use its full 128 MiB (nothing stayed
    charged to the slot's cgroup)."""
    shmem, shm, msg = meminfo("Shmem"), sysvipc("shm"), sysvipc("msg")
    box = None
    with pytest.raises(SandboxError) as caught:
        box = EnvSandbox(env_code(step=hoard), timeout_s=10, memory_mb=128)
        box.reset()
        got = box.step("hoard")
        pytest.fail(f"the environment was not stopped: {got[0]}")
    assert caught.value.kind == "memory", caught.value
    slot = os.path.join(sandbox._Zygote.get().cgroup or "", str(box._slot))
    # what the kernel frees later (a SysV IPC namespace) does not stay charged to the slot the next child gets
    assert not sandbox._Zygote.get().cgroup or confine.charged(slot) <= forkserver.LEFT_CHARGE_BYTES
    gone(box)
    assert settles(lambda: meminfo("Shmem") < shmem + 32 * 2**20), \
        f"Shmem grew by {(meminfo('Shmem') - shmem) >> 20} MiB and stayed"
    assert sysvipc("shm") <= shm and sysvipc("msg") <= msg
    use = env_code(step="x = bytearray(96 << 20)\nx[::4096] = b'y' * len(x[::4096])\nreturn 'fine', 0.0, False, False, {}")
    with EnvSandbox(use, timeout_s=10, memory_mb=128) as after:
        after.reset()
        assert after.step("go")[0] == "fine"


CGROUP_ESCAPE = """
line = [l for l in open('/proc/self/cgroup').read().splitlines() if l.split(':')[1] == 'memory'][0]
mine = '/sys/fs/cgroup/memory' + line.split(':', 2)[2]
wrote = []
for directory in (mine, os.path.dirname(mine), os.path.dirname(os.path.dirname(mine))):
    for name, value in (('memory.limit_in_bytes', '-1'), ('memory.memsw.limit_in_bytes', '-1'),
                        ('memory.oom_control', '1'), ('tasks', '0'), ('cgroup.procs', '0')):
        try:
            with open(os.path.join(directory, name), 'w') as f:
                f.write(value)
            wrote.append(os.path.join(directory, name))
        except OSError:
            pass
return json.dumps(wrote), 0.0, False, False, {}
"""


def memory_cgroup_of(pid):
    """The host path of a process's v1 memory cgroup, or None."""
    for line in pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return "/sys/fs/cgroup/memory" + path
    return None


def test_memory_cgroup_cannot_be_raised_or_left():
    """Step 1 writes -1 to its cgroup's limits (and its parents'), turns its OOM killer off and moves
    itself up a level; the host sees its cgroup, limit and OOM killer unchanged. Step 2 hoards 512 MiB of
    memfd pages: still killed by the cgroup."""
    if not sandbox._Zygote.get().cgroup or not os.path.exists("/sys/fs/cgroup/memory"):
        pytest.skip("no cgroup v1 memory controller here")
    code = env_code(step="if action == 'escape':\n" + textwrap.indent(CGROUP_ESCAPE.strip(), "    ") + "\n" + MEMFD)
    box = EnvSandbox(code, timeout_s=10, memory_mb=128)
    box.reset()
    cgroup = memory_cgroup_of(box.pid)
    limits = lambda: {n: pathlib.Path(cgroup, n).read_text() for n in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
                      if os.path.exists(os.path.join(cgroup, n))}
    before = limits()
    assert int(before["memory.limit_in_bytes"]) < 2**30
    assert json.loads(box.step("escape")[0]) == []
    assert memory_cgroup_of(box.pid) == cgroup and limits() == before
    assert "oom_kill_disable 0" in pathlib.Path(cgroup, "memory.oom_control").read_text()
    with pytest.raises(SandboxError) as caught:
        got = box.step("hoard")
        pytest.fail(f"the environment held it: {got[0]}")
    assert caught.value.kind == "memory", caught.value
    gone(box)


# --- 5. writes outside the scratch space; host sockets -----------------------------------------
@ROOT_ONLY
@JAILED
def test_writes_outside_the_scratch_space_reach_nothing():
    """Files under /var/tmp, /run/lock, the project, $HOME (/root), /home and the uid-lock directory:
    none appears on the host, nor in the next sandbox's view."""
    name = f"spade-test-{token()}"
    os.makedirs("/var/tmp", exist_ok=True)
    os.makedirs("/run/lock", exist_ok=True)
    targets = [f"/var/tmp/{name}", f"/run/lock/{name}", str(ROOT / name), str(ROOT / "tests" / name),
               f"/root/{name}", f"/home/{name}", f"/tmp/spade-sandbox-uids/{name}", f"{sys.prefix}/{name}"]
    code = env_code(step=f"""
        wrote = []
        for path in {targets!r}:
            try:
                with open(path, 'w') as f:
                    f.write('pwned')
                wrote.append(path)
            except OSError:
                pass
            try:
                os.mkdir(path + '.d')
                wrote.append(path + '.d')
            except OSError:
                pass
        return json.dumps(wrote), 0.0, False, False, {{}}""")
    try:
        with EnvSandbox(code, timeout_s=5) as box:
            box.reset()
            box.step("go")
        leaked = [p for t in targets for p in (t, t + ".d") if os.path.lexists(p)]
        assert leaked == [], f"on the host: {leaked}"
        look = env_code(reset=f"return json.dumps([p for t in {targets!r} for p in (t, t + '.d') if os.path.lexists(p)]), {{}}")
        with EnvSandbox(look, timeout_s=5) as next_box:
            assert json.loads(next_box.reset()[0]) == [], "left for the next sandbox"
    finally:
        for t in targets:
            for p in (t, t + ".d"):
                if os.path.isdir(p):
                    os.rmdir(p)
                elif os.path.lexists(p):
                    os.unlink(p)


SYSCTL = "/proc/sys/kernel/printk_ratelimit_burst"   # harmless to change, and restored below


@ROOT_ONLY
def test_host_kernel_settings_cannot_be_written():
    """A sysctl of the host (through the child's /proc/sys) and a sysfs knob: unchanged on the host."""
    old = pathlib.Path(SYSCTL).read_text()
    code = env_code(step=f"""
        done = []
        for path, value in (({SYSCTL!r}, '{int(old) + 7}'), ('/proc/sys/vm/drop_caches', '1'),
                            ('/sys/kernel/mm/transparent_hugepage/enabled', 'never'), ('/proc/sysrq-trigger', 'h')):
            try:
                with open(path, 'w') as f:
                    f.write(value)
                done.append(path)
            except OSError:
                pass
        return json.dumps(done), 0.0, False, False, {{}}""")
    try:
        with EnvSandbox(code, timeout_s=5) as box:
            box.reset()
            done = json.loads(box.step("go")[0])
        assert pathlib.Path(SYSCTL).read_text() == old
        assert done == [], done
    finally:
        if pathlib.Path(SYSCTL).read_text() != old:
            pathlib.Path(SYSCTL).write_text(old)


CONNECT = """
import socket as so
out = []
for address in %r:
    try:
        s = so.socket(so.AF_UNIX, so.SOCK_STREAM)
        s.settimeout(1)
        s.connect(address)
        s.sendall(b'hello')
        out.append('connected ' + repr(address))
    except OSError as e:
        out.append(type(e).__name__)
try:                                  # around socket(): its own pair, then connect it elsewhere
    a, b = so.socketpair()
    a.connect(%r)
    out.append('pair connected')
except OSError as e:
    out.append(type(e).__name__)
return json.dumps(out), 0.0, False, False, {}
"""


def test_host_unix_sockets_cannot_be_connected():
    """Pathname sockets (one under /var/tmp, one inside a directory the jail binds back read-only,
    where the path itself is reachable) and an abstract socket of the host, all mode 0777: the child
    connects to none, and the listeners accept nothing."""
    name = f"spade-test-{token()}"
    paths = [f"/var/tmp/{name}.sock", f"{sys.prefix}/{name}.sock"]
    listeners = []
    try:
        for address in [*paths, "\0" + name]:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            if not address.startswith("\0"):
                os.chmod(address, 0o777)
            listener.listen(8)
            listener.setblocking(False)
            listeners.append(listener)
        addresses = [*paths, "\0" + name]
        with EnvSandbox(env_code(step=CONNECT % (addresses, paths[1])), timeout_s=5) as box:
            box.reset()
            said = json.loads(box.step("go")[0])
        assert not any(s.startswith(("connected", "pair connected")) for s in said), said
        for listener in listeners:
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        for listener in listeners:
            listener.close()
        for path in paths:
            if os.path.lexists(path):
                os.unlink(path)


def test_abstract_socket_between_two_live_sandboxes():
    """Sandbox A binds and listens on an abstract unix socket and stays alive; sandbox B connects to it
    and must fail (each has its own network namespace; socket() is refused anyway)."""
    name = f"\0spade-ab-{token()}"
    listen = env_code(reset=f"""
        import socket as so
        try:
            self.s = so.socket(so.AF_UNIX, so.SOCK_STREAM)
            self.s.bind({name!r})
            self.s.listen(8)
            self.s.setblocking(False)
            return 'listening', {{}}
        except OSError as e:
            return type(e).__name__, {{}}""",
                      step="""
        try:
            conn, _ = self.s.accept()
            return 'accepted ' + repr(conn.recv(16)), 0.0, False, False, {}
        except (OSError, AttributeError) as e:
            return type(e).__name__, 0.0, False, False, {}""")
    with EnvSandbox(listen, timeout_s=5) as a:
        a.reset()
        with EnvSandbox(env_code(step=CONNECT % ([name], name)), timeout_s=5) as b:
            b.reset()
            said = json.loads(b.step("go")[0])
        assert not any(s.startswith(("connected", "pair connected")) for s in said), said
        assert not a.step("accept")[0].startswith("accepted")


# --- 6. one child cannot break the others ---------------------------------------------------
FILL = """
n = 0
try:
    while True:                        # RLIMIT_FSIZE is per file: many files
        for d in ('/tmp', '/dev/shm'):
            with open(f'{d}/fill{n}', 'wb') as f:
                f.write(b'z' * (8 << 20))
            n += 1
except OSError as e:
    return f'{e.errno} after {n}', 0.0, False, False, {}
"""
WRITE = "open('mine', 'wb').write(b'w' * (1 << 20))\nreturn str(os.path.getsize('mine')), {}"


def test_full_scratch_space_is_not_shared():
    """A fills /tmp and /dev/shm until ENOSPC and stays alive; B (beside it) and C (after it) can still
    write; the host's Shmem comes back."""
    shmem = meminfo("Shmem")
    with EnvSandbox(env_code(step=FILL), timeout_s=10, memory_mb=256) as a:
        a.reset()
        assert a.step("fill")[0].startswith("28 after")          # ENOSPC
        with EnvSandbox(env_code(reset=WRITE), timeout_s=5) as b:
            assert b.reset()[0] == str(1 << 20)
    with EnvSandbox(env_code(reset=WRITE), timeout_s=5) as c:
        assert c.reset()[0] == str(1 << 20)
    assert settles(lambda: meminfo("Shmem") < shmem + 32 * 2**20)


@pytest.mark.parametrize("mess", [
    "for _ in range(20000):\n    os.mkdir('d')\n    os.chdir('d')",
    "os.makedirs('locked/inner')\nopen('locked/inner/f', 'w').write('x')\nopen('ro', 'w').write('x')\n"
    "os.chmod('ro', 0)\nos.chmod('locked/inner', 0)\nos.chmod('locked', 0)\nos.chmod('/tmp', 0)",
    "os.mkdir('many')\nfor i in range(50000):\n    os.close(os.open(f'many/{i}', os.O_CREAT | os.O_WRONLY))",
], ids=["deep-chain", "chmod-0", "50k-files"])
def test_leftovers_in_the_scratch_space(mess):
    """A 20000-deep directory chain, unreadable files and directories, 50k files left behind: the fork
    server survives (same pid, still running), closing is quick and the next sandbox works quickly."""
    server = zygote_pid()
    with EnvSandbox(env_code(step=mess + "\nreturn 'left', 0.0, False, False, {}"), timeout_s=10) as box:
        box.reset()
        assert box.step("go")[0] == "left"
        started = time.monotonic()
    assert time.monotonic() - started < 2, "close took too long"
    assert zygote_pid() == server and sandbox._Zygote.get().process.poll() is None
    gone(box)


def test_child_holds_no_descriptor_of_the_fork_server():
    """From the host's /proc: the child's only fds are stdin/stdout/stderr on /dev/null and its own reply
    socket (not the fork server's control socket, nor anything else of the trainer's or the jail's)."""
    with EnvSandbox(env_code(), timeout_s=5) as box:
        box.reset()
        fds = {int(fd): os.readlink(f"/proc/{box.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{box.pid}/fd")}
    assert set(fds) == {0, 1, 2, 3}, fds
    assert [fds[0], fds[1], fds[2]] == ["/dev/null"] * 3 and fds[3].startswith("socket:"), fds


# --- 7. two fork servers on one machine ----------------------------------------------------------
OTHER_TRAINER = r"""
import json, os, sys
sys.path[:0] = [sys.argv[1]]
from sandbox import EnvSandbox
code = sys.argv[2]
box = EnvSandbox(code, timeout_s=5)
print(json.dumps({"uid": box.reset()[0], "pid": box.pid}), flush=True)
for line in sys.stdin:
    op, _, arg = line.strip().partition(" ")
    if op == "kill":
        print(box.step("kill " + arg)[0], flush=True)
    elif op == "ping":
        print(box.reset()[0], flush=True)
    else:
        break
box.close()
"""
KILLER = env_code(reset="return str(os.getuid()), {}", step="""
    try:
        os.kill(int(action.split()[1]), 9)
        return 'killed', 0.0, False, False, {}
    except OSError as e:
        return type(e).__name__, 0.0, False, False, {}""")


def read_line(process, timeout=20):
    if not select.select([process.stdout], [], [], timeout)[0]:
        raise AssertionError("the other trainer did not answer")
    line = process.stdout.readline()
    assert line, f"the other trainer died (exit {process.poll()})"
    return line.strip()


@ROOT_ONLY
def test_two_fork_servers_use_different_uids_and_cannot_kill_each_other():
    """A second trainer process on the machine: its sandbox and ours run as different host uids (the
    host's /proc says so; each child reads the same one, SEEN_UID), and neither can kill the other's sandbox."""
    other = subprocess.Popen([sys.executable, "-c", OTHER_TRAINER, str(ROOT), KILLER], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        theirs = json.loads(read_line(other))
        with EnvSandbox(KILLER, timeout_s=5) as ours:
            our_uid = ours.reset()[0]
            assert our_uid == theirs["uid"] == str(confine.SEEN_UID)
            assert uid_of(ours.pid) != uid_of(theirs["pid"]) and 0 not in (uid_of(ours.pid), uid_of(theirs["pid"]))
            assert ours.step(f"kill {theirs['pid']}")[0] in ("ProcessLookupError", "PermissionError")
            assert os.path.exists(f"/proc/{theirs['pid']}")
            other.stdin.write(f"kill {ours.pid}\n")
            other.stdin.flush()
            assert read_line(other) in ("ProcessLookupError", "PermissionError")
            assert ours.reset()[0] == our_uid                  # the victim still answers
            other.stdin.write("ping\n")
            other.stdin.flush()
            assert read_line(other) == theirs["uid"]
    finally:
        if other.poll() is None:
            other.stdin.close()
            try:
                other.wait(timeout=10)
            except subprocess.TimeoutExpired:
                other.kill()
                other.wait()


# --- 8. the trainer's keyrings --------------------------------------------------------------
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine, (None, None))
KEYCTL_REVOKE, KEYCTL_UNLINK, KEYCTL_READ = 3, 9, 11
SPY = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
seen = []
for path in ('/proc/keys', '/proc/key-users'):
    try:
        seen.append(open(path).read())
    except OSError as e:
        seen.append(type(e).__name__)
buf = ctypes.create_string_buffer(4096)
for serial, ring in %r:
    for number, args in ((%d, (11, serial, buf, 4096)), (%d, (6, serial, buf, 4096))):   # READ, DESCRIBE
        n = libc.syscall(number, *args)
        seen.append(buf.raw[:max(n, 0)].decode(errors='replace') if n > 0 else f'refused {ctypes.get_errno()}')
    for special in (-3, -4, -5):      # session, user, user-session keyrings: what the child links to
        n = libc.syscall(%d, 11, special, buf, 4096)
        seen.append(buf.raw[:max(n, 0)].hex() if n > 0 else f'refused {ctypes.get_errno()}')
return json.dumps(seen), {}
"""


@pytest.fixture
def trainer_keys():
    """Keys in the test process's session and user keyrings: [(serial, keyring)], secrets."""
    if ADD_KEY is None:
        pytest.skip("no syscall numbers for this architecture")
    secret = f"spade-test-secret-{token()}"
    value = f"hunter2-{token()}".encode()
    keys = []
    for ring in (-3, -4):             # KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING
        serial = libc.syscall(ADD_KEY, b"user", f"{secret}{ring}".encode(), value, len(value), ring)
        if serial < 0:
            pytest.skip(f"add_key is not permitted here (errno {ctypes.get_errno()})")
        keys.append((serial, ring))
    yield keys, secret, value.decode()
    for serial, ring in keys:
        libc.syscall(KEYCTL, KEYCTL_REVOKE, serial)
        libc.syscall(KEYCTL, KEYCTL_UNLINK, serial, ring)


def test_trainer_keyring_is_not_readable(trainer_keys):
    """The child lists /proc/keys, reads the keys by serial and reads its own session/user keyrings:
    it sees neither the description nor the value of the trainer's keys."""
    keys, secret, value = trainer_keys
    with EnvSandbox(env_code(reset=SPY % (keys, KEYCTL, KEYCTL, KEYCTL)), timeout_s=5) as box:
        seen = box.reset()[0]
    assert secret not in seen and value not in seen
    assert value.encode().hex() not in seen


def test_keyring_inherited_by_a_new_fork_server_is_not_readable(trainer_keys):
    """A trainer started after the keys were added: its fork server inherits the session keyring, and
    its child must still not see the keys (it joins a fresh session keyring before any env code)."""
    keys, secret, value = trainer_keys
    script = ("import sys; sys.path[:0] = [sys.argv[1]]\nfrom sandbox import EnvSandbox\n"
              "with EnvSandbox(sys.argv[2], timeout_s=5) as box:\n    print(box.reset()[0])")
    done = subprocess.run([sys.executable, "-c", script, str(ROOT), env_code(reset=SPY % (keys, KEYCTL, KEYCTL, KEYCTL))],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    assert secret not in done.stdout and value not in done.stdout and value.encode().hex() not in done.stdout


# --- 9. forged frames at the gate -----------------------------------------------------------
RAISING_RESET = "raise RuntimeError('this environment never resets')"
FORGED = {
    0: {"class": "HostileEnv", "tool_use": False},                     # load
    1: [0, []],                                                        # construct
    2: ["a forged first observation", {}, ["str", "dict"]],           # reset(42)
    3: ["ok", 0.0, False, False, {}, STEP_KINDS],                      # the probes
    4: ["ok", 0.0, False, False, {}, STEP_KINDS],
    5: ["ok", 0.0, False, False, {}, STEP_KINDS],
}


@pytest.mark.parametrize("ids", [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3, 4, 5], [2], [1, 2, 3]])
def test_forged_frames_at_import_do_not_pass_the_gate(ids):
    """At import time the code writes well-formed replies for request ids it guesses; its reset()
    always raises. The gate must not pass it."""
    frames = [{"id": i, "ok": True, "value": FORGED[i]} for i in ids]
    code = wire_env(top=f"for _frame in {frames!r}:\n    write_frame(_frame)", reset=RAISING_RESET)
    result = validate_env(code, timeout_s=5)
    assert not result.ok, result
    assert zygote_children() == []


def test_forged_frame_after_each_call_does_not_pass_the_gate():
    """Every method writes the reply for the NEXT request id ahead of time (so that no frame is pending
    while the call runs, but one is when the next call starts)."""
    code = wire_env(top=f"_forged = {FORGED!r}\n_next = [1]\n"
                        "def _ahead():\n    i = _next[0]\n    _next[0] += 1\n"
                        "    write_frame({'id': i, 'ok': True, 'value': _forged.get(i, _forged[5])})\n"
                        "write_frame({'id': 0, 'ok': True, 'value': _forged[0]})",
                    init="_ahead()", reset=RAISING_RESET)
    assert not validate_env(code, timeout_s=5).ok


# --- 10. the parent trusts nothing the child says ----------------------------------------------
FORGE_REPLY = """
_orig = json.dumps
def _forge(obj, *a, **k):
    if type(obj) is dict and obj.get('ok') is True and type(obj.get('value')) is list and len(obj['value']) == 6:
        return %s
    return _orig(obj, *a, **k)
json.dumps = _forge
"""


RAW = FORGE_REPLY % ("'{\"id\": %d, \"ok\": true, \"value\": [\"ok\", %s, false, false, %s, []]}%s' % "
                    "(obj['id'], _REWARD, _INFO, _TAIL)")
FLOAT = "import builtins\nbuiltins.float = lambda x: x\nmath.isfinite = lambda x: True\n"   # in step(): the
BOOL = "import builtins\nbuiltins.bool = lambda x: x\n"                                    # harness needs them


@pytest.mark.parametrize("patch, step", [
    pytest.param("math.isfinite = lambda x: True", "return 'ok', float('nan'), False, False, {}", id="isfinite-nan"),
    pytest.param("math.isfinite = lambda x: True", "return 'ok', float('-inf'), False, False, {}", id="isfinite-inf"),
    pytest.param("", FLOAT + "return 'ok', None, False, False, {}", id="float-none"),
    pytest.param("", FLOAT + "return 'ok', 'lots', False, False, {}", id="float-str"),
    pytest.param("", FLOAT + "return 'ok', [1.0], False, False, {}", id="float-list"),
    pytest.param("", BOOL + "return 'ok', 0.0, 1, False, {}", id="bool-int"),
    pytest.param("", BOOL + "return 'ok', 0.0, False, 'yes', {}", id="bool-str"),
    pytest.param("from sandbox import contract\ncontract.as_observation = lambda o, w: o", "return {'a': 1}, 0.0, False, False, {}",
                 id="obs-dict"),
    pytest.param("from sandbox import contract\ncontract.as_observation = lambda o, w: o", "return None, 0.0, False, False, {}",
                 id="obs-none"),
    pytest.param("from sandbox import contract\ncontract.plain_info = lambda i: i", "return 'ok', 0.0, False, False, {'a': {'b': 1}}",
                 id="info-nested-dict"),
    pytest.param("from sandbox import contract\ncontract.plain_info = lambda i: i", "return 'ok', 0.0, False, False, {'a': [1, 2]}",
                 id="info-list-value"),
    pytest.param("from sandbox import contract\ncontract.plain_info = lambda i: i", "return 'ok', 0.0, False, False, [1, 2]",
                 id="info-list"),
    pytest.param("from sandbox import contract\ncontract.plain_info = lambda i: i\nmath.isfinite = lambda x: True",
                 "return 'ok', 0.0, False, False, {'a': float('nan')}", id="info-nan"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': [{'a': 1}, 0.0, False, False, {}, obj['value'][5]]})", "",
                 id="json-obs-dict"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', None, False, False, {}, obj['value'][5]]})", "",
                 id="json-reward-none"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', 0.0, 0, False, {}, obj['value'][5]]})", "",
                 id="json-terminated-int"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', 0.0, False, None, {}, obj['value'][5]]})", "",
                 id="json-truncated-none"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', True, False, False, {}, obj['value'][5]]})", "",
                 id="json-reward-bool"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', 0.0, False, False, {'x': {'y': [1]}}, obj['value'][5]]})",
                 "", id="json-info-nested"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', 0.0, False, False, 'info', obj['value'][5]]})", "",
                 id="json-info-str"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', 0.0, False, False, {}, obj['value'][5], 'extra']})", "",
                 id="json-7-items"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': ['ok', 0.0, False, False, {}]})", "", id="json-5-items"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'value': {'obs': 'ok'}})", "", id="json-value-dict"),
    pytest.param(FORGE_REPLY % "_orig({k: v for k, v in obj.items() if k != 'value'})", "", id="json-no-value"),
    pytest.param("_REWARD, _INFO, _TAIL = 'NaN', '{}', ''\n" + RAW, "", id="raw-nan"),
    pytest.param("_REWARD, _INFO, _TAIL = '-Infinity', '{}', ''\n" + RAW, "", id="raw-infinity"),
    pytest.param("_REWARD, _INFO, _TAIL = '1e999', '{}', ''\n" + RAW, "", id="raw-1e999"),
    pytest.param("_REWARD, _INFO, _TAIL = '9' * 5000, '{}', ''\n" + RAW, "", id="raw-5000-digits"),
    pytest.param("_REWARD, _INFO, _TAIL = '0.0', '{\"a\": Infinity}', ''\n" + RAW, "", id="raw-info-infinity"),
    pytest.param("_REWARD, _INFO, _TAIL = '0.0', '{\"a\": 1e400}', ''\n" + RAW, "", id="raw-info-1e400"),
    pytest.param("_REWARD, _INFO, _TAIL = '0.0', '{}', ' trailing'\n" + RAW, "", id="raw-trailing"),
    pytest.param("_REWARD, _INFO, _TAIL = '0.0', '{\"a\": 1, \"a\": {\"b\": 2}}', ''\n" + RAW, "",
                 id="raw-duplicate-key"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'id': obj['id'] + 1})", "", id="json-wrong-id"),
    pytest.param(FORGE_REPLY % "_orig({**obj, 'ok': 1})", "", id="json-ok-int"),
])
def test_parent_type_checks_every_step_reply(patch, step):
    """Whatever the environment patches in its own process (math.isfinite, float, bool, the contract's
    coercion, json.dumps), the trainer gets a SandboxError, never a bad value."""
    code = env_code(top=patch, step=step or "return 'ok', 0.0, False, False, {}")
    refused(code)


@pytest.mark.parametrize("value", ["[{'a': 1}, {}, ['str', 'dict']]", "['ok', {'a': {'b': 1}}, ['str', 'dict']]",
                                   "['ok', [], ['str', 'dict']]", "['ok', {}, 'str']", "['ok', {}]", "None"])
def test_parent_type_checks_the_reset_reply(value):
    """The same for reset(): a forged [observation, info, kinds] of the wrong shape or types."""
    forge = ("_orig = json.dumps\n"
             "def _forge(obj, *a, **k):\n"
             "    if type(obj) is dict and obj.get('ok') is True and type(obj.get('value')) is list and len(obj['value']) == 3:\n"
             f"        obj = {{**obj, 'value': {value}}}\n"
             "    return _orig(obj, *a, **k)\n"
             "json.dumps = _forge")
    refused(env_code(top=forge), calls=lambda box: box.reset())


@pytest.mark.parametrize("klass", ["123", "['HostileEnv']", "{'n': 'HostileEnv'}", "True"])
def test_parent_type_checks_the_load_reply(klass):
    """The load reply's class name, forged as a non-str by a patched json.dumps at import time: the
    constructor raises SandboxError (and leaves no child), not another exception."""
    forge = ("_orig = json.dumps\n"
             "def _forge(obj, *a, **k):\n"
             "    if type(obj) is dict and obj.get('ok') is True and type(obj.get('value')) is dict and 'class' in obj['value']:\n"
             f"        obj = {{**obj, 'value': {{**obj['value'], 'class': {klass}}}}}\n"
             "    return _orig(obj, *a, **k)\n"
             "json.dumps = _forge")
    raised = None
    try:
        refused(env_code(top=forge), calls=lambda box: box.reset())
    except AssertionError:
        raise
    except Exception as e:        # anything but SandboxError: the trainer's handler would not catch it
        raised = e
    finally:
        import gc
        stranded = [box for box in gc.get_objects() if type(box) is EnvSandbox and box.alive]
        for box in stranded:      # a sandbox whose failed constructor left its child running
            box.close()
    assert raised is None and not stranded, \
        f"EnvSandbox() raised {type(raised).__name__}: {raised} (not SandboxError); child left alive: {bool(stranded)}"


def test_parent_type_checks_tool_replies():
    """call_tool's result forged as a dict, tools() forged as a dict: SandboxError."""
    forge = ("_orig = json.dumps\n"
             "def _forge(obj, *a, **k):\n"
             "    if type(obj) is dict and obj.get('ok') is True and obj.get('value') in ([], ''):\n"
             "        obj = {**obj, 'value': {'output': 'x'}}\n"
             "    return _orig(obj, *a, **k)\n"
             "json.dumps = _forge")
    tool_env = env_code(top=forge).replace("class HostileEnv:", "class HostileEnv(ToolUseBaseEnv):\n    def get_tools(self):\n        return []\n    def execute_tool(self, name, args):\n        return {'output': ''}\n")
    refused(tool_env, calls=lambda box: (box.reset(), box.tools()))
    refused(tool_env, calls=lambda box: (box.reset(), box.call_tool("f", {})))


# --- 11. no CPU between calls -----------------------------------------------------------------
@pytest.mark.parametrize("rest", [
    # answers step itself, then keeps computing inside step()
    """import resource
soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
write_frame({'id': 2, 'ok': True, 'value': ['ok', 0.0, False, False, {}, %r]})
while True:
    pass""" % STEP_KINDS,
    # returns normally, but a timer's handler computes whenever it fires
    """import signal, resource
soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
def burn(*_):
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        pass
signal.signal(signal.SIGALRM, burn)
signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
return 'ok', 0.0, False, False, {}""",
    # SIGCONT handler and a SIGTSTP/SIGTTIN/SIGTTOU ignore: the stop must still hold
    """import signal
for s in (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
    signal.signal(s, signal.SIG_IGN)
signal.signal(signal.SIGCONT, lambda *_: None)
write_frame({'id': 2, 'ok': True, 'value': ['ok', 0.0, False, False, {}, %r]})
while True:
    pass""" % STEP_KINDS,
], ids=["busy-after-own-reply", "itimer-handler", "signal-handlers"])
def test_no_cpu_between_calls(rest):
    """After a reply, with no call in flight, the child's CPU time (the host's /proc/<pid>/stat) does
    not grow over a second."""
    with EnvSandbox(wire_env(step=rest), timeout_s=5) as box:
        box.reset()
        assert box.step("go")[0] == "ok"
        before, _ = cpu_ticks(box.pid)
        time.sleep(1.0)
        after, state = cpu_ticks(box.pid)
    grew = (after - before) / os.sysconf("SC_CLK_TCK")
    assert grew <= 0.05, f"the child computed {grew:.2f} s between calls (state {state})"


# --- 12. no GPU or other device nodes ------------------------------------------------------
DEVICES = """
out = {'dev': sorted(os.listdir('/dev')), 'opened': []}
for path in ('/dev/nvidia0', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/dri/card0', '/dev/dri/renderD128',
             '/dev/kfd', '/dev/mem', '/dev/kmem', '/dev/port', '/dev/core', '/dev/sda', '/dev/vda', '/dev/nvme0'):
    try:
        os.close(os.open(path, os.O_RDONLY))
        out['opened'].append(path)
    except OSError:
        pass
for name, major, minor in (('nv', 195, 0), ('mem', 1, 1)):   # a device node of its own, in its scratch space
    try:
        os.mknod(name, 0o20666, os.makedev(major, minor))
        os.close(os.open(name, os.O_RDONLY))
        out['opened'].append(name)
    except OSError:
        pass
return json.dumps(out), {}
"""
DEV_ALLOWED = {"null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd", "stdin", "stdout",
               "stderr", "core", "mqueue", "console"}


@JAILED
def test_no_gpu_or_device_nodes():
    with EnvSandbox(env_code(reset=DEVICES), timeout_s=5) as box:
        seen = json.loads(box.reset()[0])
    assert not [d for d in seen["dev"] if d.startswith(("nvidia", "dri", "kfd", "accel"))], seen["dev"]
    assert set(seen["dev"]) <= DEV_ALLOWED, set(seen["dev"]) - DEV_ALLOWED
    assert seen["opened"] == [], seen["opened"]


# --- 13. the child sees no other process --------------------------------------------------------
@ROOT_ONLY
def test_child_sees_and_signals_no_other_process():
    """/proc holds only the child itself (pid 1); signals to the trainer's and the fork server's pids,
    and kill(-1), reach nobody: trainer, fork server and a bystander sandbox all survive."""
    with EnvSandbox(env_code(), timeout_s=5) as bystander:
        bystander.reset()
        fork_server = int(pathlib.Path(f"/proc/{bystander.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        # signal 0 to the trainer (a real SIGKILL would end this run); SIGKILL to the others
        targets = [(os.getpid(), 0), (fork_server, 9), (zygote_pid(), 9), (bystander.pid, 9)]
        code = env_code(reset=f"""
            out = {{'pids': sorted(p for p in os.listdir('/proc') if p.isdigit()), 'me': os.getpid(), 'killed': []}}
            for pid, sig in {targets!r}:
                for s in sorted({{0, sig}}):
                    try:
                        os.kill(pid, s)
                        out['killed'].append([pid, s])
                    except OSError:
                        pass
            try:
                os.kill(-1, 9)
                out['killed'].append([-1, 9])
            except OSError:
                pass
            return json.dumps(out), {{}}""")
        with EnvSandbox(code, timeout_s=5) as box:
            seen = json.loads(box.reset()[0])
        assert seen["pids"] == ["1"] and seen["me"] == 1, seen
        assert [k for k in seen["killed"] if k[0] != 1] == [], seen["killed"]
        assert bystander.reset() == ("ready", {})
        assert os.path.exists(f"/proc/{fork_server}")
    assert sandbox._Zygote.get().process.poll() is None


# --- 14. the trainer's home is hidden --------------------------------------------------------
@ROOT_ONLY
@JAILED
def test_home_directory_is_hidden():
    """A 0644 file under /root and /root/.ssh (made for the test if missing): the child can read neither
    nor list them."""
    secret_name = f".spade-test-secret-{token()}"
    secret_text = f"secret-{token()}"
    secret = pathlib.Path("/root") / secret_name
    ssh = pathlib.Path("/root/.ssh")
    made_ssh = not ssh.exists()
    key = ssh / f"spade-test-{token()}"
    try:
        secret.write_text(secret_text)
        secret.chmod(0o644)
        ssh.mkdir(mode=0o700, exist_ok=True)
        key.write_text(secret_text)
        key.chmod(0o644)
        code = env_code(reset=f"""
            out = []
            for path in ({str(secret)!r}, {str(key)!r}):
                try:
                    out.append(open(path).read())
                except OSError as e:
                    out.append(type(e).__name__)
            for path in ('/root', '/root/.ssh'):
                try:
                    out.append(' '.join(os.listdir(path)))
                except OSError as e:
                    out.append(type(e).__name__)
            return json.dumps(out), {{}}""")
        with EnvSandbox(code, timeout_s=5) as box:
            seen = box.reset()[0]
        assert secret_text not in seen and secret_name not in seen and key.name not in seen, seen
        assert ".ssh" not in json.loads(seen)[2].split(), seen
    finally:
        secret.unlink(missing_ok=True)
        key.unlink(missing_ok=True)
        if made_ssh:
            ssh.rmdir()


# --- found in review: each a way a trainer could crash, hang or lose a layer ---------------------
@JAILED
def test_the_jails_emptied_directories_and_dev_are_read_only_mounts():
    """Even a child that is root of bubblewrap's user namespace (a trainer that is not root) cannot
    leave files in /dev, /run, /var/tmp, /home or /root: those tmpfs are read-only mounts."""
    code = env_code(reset="""
        mounts = {line.split()[4]: line.split()[5] for line in open('/proc/self/mountinfo')}
        return json.dumps({p: mounts.get(p, '') for p in ('/dev', '/run', '/var/tmp', '/home', '/root')}), {}""")
    with EnvSandbox(code) as box:
        options = json.loads(box.reset()[0])
    assert all(opts.split(",")[0] == "ro" for path, opts in options.items() if os.path.isdir(path)), options


def test_a_forged_construct_reply_is_a_rejection_not_a_crash():
    for forged in ("[0, True]", "[0, {'a': 1}]", "[0, 7]", "[0, ['reset', 3]]", "'x'"):
        code = env_code(top=f"""
            _dumps = json.dumps
            def _forge(obj, *a, **k):
                if type(obj) is dict and type(obj.get('value')) is list and len(obj['value']) == 2:
                    obj = dict(obj, value={forged})
                return _dumps(obj, *a, **k)
            json.dumps = _forge""")
        result = validate_env(code, timeout_s=5)
        assert (result.ok, result.stage) == (False, "output"), (forged, result)


def test_brace_repair_is_linear_on_backslashes():
    started = time.monotonic()
    result = validate_env('x = f"' + "\\" * 40 + "{a b}", timeout_s=5)
    assert not result.ok and time.monotonic() - started < 2


def test_sandboxes_work_with_file_descriptors_past_1024():
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with EnvSandbox(env_code(), timeout_s=5) as box:
            assert box.reset() == ("ready", {}) and box.step("x")[0] == "ok"
    finally:
        for fd in held:
            os.close(fd)


def test_the_trainer_refuses_to_run_code_it_cannot_isolate(monkeypatch):
    """Where neither the jail, nor namespaces, nor a uid of its own are available (a non-root trainer
    without bubblewrap or user namespaces), it says so and stops, unless SPADE_UNSAFE_SANDBOX=1. The
    fork server's report is a test double here; the real probe is what every other test runs."""
    report = {"namespaces": "missing: unshare: Operation not permitted", "memory": "missing: no cgroup",
              "uid": "missing: the trainer is not root", "syscalls": "a seccomp filter and a fresh session keyring"}
    monkeypatch.setattr(sandbox.confine, "jail", lambda *a, **k: (None, "bubblewrap is not installed"))
    monkeypatch.setattr(sandbox._Zygote, "_start", lambda self, prefix: setattr(self, "process", None) or
                        setattr(self, "control", socket.socket()) or {"isolation": report})
    monkeypatch.setattr(sandbox._Zygote, "close", lambda self: self.control.close())
    with pytest.raises(RuntimeError, match="cannot isolate environment code here: jail: bubblewrap is not installed"):
        sandbox._Zygote()
    monkeypatch.setenv("SPADE_UNSAFE_SANDBOX", "1")
    assert sandbox._Zygote().isolation["uid"].startswith("missing")


def test_the_child_holds_no_capability_and_is_first_for_the_oom_killer():
    code = env_code(reset="""
        status = {l.split(':')[0]: l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')}
        return json.dumps([status, open('/proc/self/oom_score_adj').read().strip()]), {}""")
    with EnvSandbox(code) as box:
        status, adj = json.loads(box.reset()[0])
    assert set(status.values()) == {"0000000000000000"} and adj == "1000", status


@ROOT_ONLY
@JAILED
def test_the_fork_server_holds_only_its_capabilities():
    status = pathlib.Path(f"/proc/{fork_server_pid()}/status").read_text()
    effective = int(next(l for l in status.splitlines() if l.startswith("CapEff")).split()[1], 16)
    names = {"CHOWN": 0, "KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "SYS_ADMIN": 21}
    assert effective == sum(1 << names[c] for c in sandbox.confine.CAPABILITIES)


@pytest.mark.parametrize("call", ["libc.syscall(294, 0)", "libc.syscall(272, 0x10000000)",
                                  "libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)", "libc.syscall(435, 0, 0)"],
                         ids=["inotify_init1", "unshare-user", "clone-newuser", "clone3"])
def test_refused_system_calls(call):
    if os.uname().machine != "x86_64":
        pytest.skip("x86_64 syscall numbers")
    code = env_code(top="import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)",
                    reset=f"r = {call}\nreturn f'{{r}} {{ctypes.get_errno()}}', {{}}")
    with EnvSandbox(code) as box:
        result, errno = map(int, box.reset()[0].split())
    assert result == -1 and errno in (1, 38), (result, errno)   # EPERM, or ENOSYS for clone3


def test_an_action_at_the_cap_in_astral_characters_reaches_the_environment():
    with EnvSandbox(env_code(step="return str(len(action)), 0.0, False, False, {}"), timeout_s=10) as box:
        box.reset()
        assert box.step("\U0001F600" * 100_000)[0] == "100000"


def test_a_child_killed_between_calls_is_a_crash_not_output():
    box = EnvSandbox(env_code(), timeout_s=5)
    box.reset()
    os.kill(box.pid, 9)
    time.sleep(0.2)
    with pytest.raises(SandboxError) as caught:
        box.step("x")
    assert caught.value.kind == "crash" and "SIGKILL" in caught.value.message


def test_a_class_without_step_fails_at_the_interface_stage():
    result = validate_env("class HalfEnv:\n    def reset(self, seed=None):\n        return 'x', {}\n", timeout_s=5)
    assert (result.ok, result.stage) == (False, "interface") and "step()" in result.error


def test_a_sandbox_dropped_without_close_is_reaped_by_the_next_request():
    import gc
    box = EnvSandbox(env_code(), timeout_s=5)
    pid = box.pid
    del box
    gc.collect()
    with EnvSandbox(env_code(), timeout_s=5) as fresh:
        assert fresh.reset() == ("ready", {})
        assert not os.path.exists(f"/proc/{pid}") and zygote_children() == [fresh.pid]


TRAINER_WITH_A_PATH = """
import sys
sys.path.insert(0, sys.argv[1])
import sandbox
with sandbox.EnvSandbox("import only_under_tmp\\n" + sys.argv[2]) as box:
    print(box.reset()[0])
"""


def test_a_module_the_trainer_imports_from_tmp_imports_in_a_sandbox(tmp_path):
    """The child's /tmp is private, so what the trainer imports from under /tmp is bound back."""
    assert str(tmp_path).startswith("/tmp/")
    tmp_path.chmod(0o755)   # as a virtualenv's directories are; pytest's parents stay 0700 (emptied and rebuilt)
    (tmp_path / "only_under_tmp.py").write_text("VALUE = 'found under /tmp'\n")
    code = env_code(reset="import only_under_tmp\nreturn only_under_tmp.VALUE, {}")
    result = subprocess.run([sys.executable, "-c", TRAINER_WITH_A_PATH, str(tmp_path), code], capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert result.stdout.strip() == "found under /tmp", result.stderr[-2000:]


def test_a_trainer_run_from_tmp_itself_still_gets_a_private_writable_tmp(tmp_path):
    """A script run from /tmp puts /tmp on sys.path: that is not bound back (which would show the host's
    /tmp and leave the child no scratch space); the child's /tmp stays its own and writable."""
    secret = tmp_path / "trainer_secret.txt"
    secret.write_text("host /tmp file")
    tmp_path.chmod(0o755)
    secret.chmod(0o644)
    code = env_code(reset=f"""
        open("/tmp/scratch.txt", "w").write("written")
        import os
        return f"{{open('/tmp/scratch.txt').read()}} {{os.path.exists({str(secret)!r})}}", {{}}""")
    script = TRAINER_WITH_A_PATH.replace("import only_under_tmp\\n", "")
    result = subprocess.run([sys.executable, "-c", script, "/tmp", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.stdout.strip() == "written False", result.stderr[-2000:]


# --- 15. urgent (out-of-band) data on the reply socket --------------------------------------------
URGENT = "_urgent = _socket.socket(fileno=os.dup(reply_fd()))\n_urgent.send(b'!', _socket.MSG_OOB)\n_urgent.close()"
OWN_STEP_REPLY = f"write_frame({{'id': 2, 'ok': True, 'value': ['ok', 0.0, False, False, {{}}, {STEP_KINDS!r}]}})"


def returns_within(seconds, call):
    """What `call()` returned or raised, provided it did so within `seconds`. If it still blocks then,
    every child of the fork server is killed (which ends the block) and the test fails."""
    outcome = []

    def run():
        try:
            outcome.append(call())
        except BaseException as e:   # what the trainer would have seen, judged by the caller
            outcome.append(e)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for pid in zygote_children():
            os.kill(pid, 9)
        thread.join(10)
        pytest.fail(f"the call still blocked {seconds:g} s after it began")
    return outcome[0]


@pytest.mark.parametrize("where, kinds", [pytest.param("reset", ["timeout"], id="reset"),
                                         pytest.param("step", ["timeout"], id="step"),
                                         pytest.param("after-reply", ["output", "timeout"], id="after-reply")])
def test_urgent_data_on_the_reply_socket_cannot_outlast_a_deadline(where, kinds):
    """One MSG_OOB byte sent by the child in reset, in a step (which then computes forever), or after a
    reply of its own (the child is stopped then, before or after the byte went out: the next call sees
    it waiting, or receives it as the start of a reply that never comes): every call returns within its
    deadline."""
    hang = URGENT + "\nwhile True:\n    pass"
    code = {"reset": wire_env(reset=hang), "step": wire_env(step=hang),
            "after-reply": wire_env(step=f"{OWN_STEP_REPLY}\n{URGENT}\ntime.sleep(60)")}[where]
    box = EnvSandbox(code, timeout_s=TIMEOUT, memory_mb=256)
    started = time.monotonic()
    error = returns_within(3 * TIMEOUT + 2, lambda: (box.reset(seed=0), box.step("a"), box.step("b")))
    assert isinstance(error, SandboxError) and error.kind in kinds, repr(error)
    assert time.monotonic() - started < 3 * TIMEOUT + 2
    gone(box)


def test_urgent_data_cannot_hang_the_gate():
    """The byte sent at import time, then a loop: validate_env says "timeout" within the call's deadline."""
    code = wire_env(top=URGENT + "\nwhile True:\n    pass")
    result = returns_within(TIMEOUT + 2, lambda: validate_env(code, timeout_s=10, call_timeout_s=TIMEOUT))
    assert (result.ok, result.stage) == (False, "timeout"), result
    assert zygote_children() == []


def test_urgent_data_cannot_hang_a_play():
    """agent.play of a game that sends an urgent byte in its first step and computes forever: the play
    ends within the deadline as a FAILED timeout."""
    from agent import play
    from envs import Environment
    from backend import engine, models
    from test_agent import ScriptedEngine
    tokenizer = models.tiny_tokenizer()
    scripted = ScriptedEngine(tokenizer, lambda prompt: "\\boxed{go}")
    game = Environment("urgent", "Logical Deduction", wire_env(step=URGENT + "\nwhile True:\n    pass"))
    [episode] = returns_within(2 * TIMEOUT + 5, lambda: play([game], scripted, tokenizer, 1, max_turns=3, max_new_tokens=32,
                                                             params=engine.SamplingParams(temperature=1.0), timeout_s=TIMEOUT))
    assert (episode.status, episode.failed, str(episode.error).split(":")[0]) == ("error", True, "timeout"), episode
    assert zygote_children() == []


# --- 16. numbers the child sends --------------------------------------------------------------
HUGE = "1" + "0" * 400   # an exact integer of 401 digits: float() of it overflows


@pytest.mark.parametrize("patch, step, kind", [
    pytest.param("", f"return 'ok', {HUGE}, True, False, {{}}", "contract", id="returned"),
    pytest.param(f"_REWARD, _INFO, _TAIL = {HUGE!r}, '{{}}', ''\n" + RAW, "", "output", id="raw"),
    pytest.param(f"_REWARD, _INFO, _TAIL = '-' + {HUGE!r}, '{{}}', ''\n" + RAW, "", "output", id="raw-negative"),
])
def test_a_huge_exact_integer_reward_is_a_clean_error(patch, step, kind):
    """A reward of 10**400 (returned, or written as such on the wire): a SandboxError, not an
    OverflowError out of the reply checks; and the gate rejects it instead of raising."""
    code = env_code(top=patch, step=step or "return 'ok', 0.0, False, False, {}")
    assert refused(code, kinds=(kind,)).kind == kind
    result = validate_env(code, timeout_s=10)
    assert not result.ok and result.stage in ("step", "output"), result


@pytest.mark.parametrize("reward, clipped", [("1.7e308", 10.0), ("-1e300", -10.0), ("10.5", 10.0), ("-3.25", -3.25)])
def test_a_play_never_sees_a_reward_outside_the_contracts_range(reward, clipped):
    """The gate only probes; in a play, a step's reward comes back inside METHOD 3.1's [-10, 10]."""
    with EnvSandbox(env_code(step=f"return 'ok', {reward}, False, False, {{}}"), timeout_s=5) as box:
        box.reset()
        assert [box.step("go")[1] for _ in range(2)] == [clipped, clipped]


def hostile_rewards():
    """Environments whose rewards are as large as the wire allows, each way it can say them."""
    forged = lambda text: env_code(top=f"_REWARD, _INFO, _TAIL = {text!r}, '{{}}', ''\n" + RAW.replace(
        "false, false", "true, false"))
    return {"max-float-twice": env_code(init="self.n = 0", step="self.n += 1\nreturn 'ok', 1.7e308, self.n > 1, False, {}"),
            "min-float": env_code(step="return 'ok', -1.7e308, True, False, {}"),
            "exact-int": env_code(step=f"return 'ok', {HUGE}, True, False, {{}}"),
            "raw-int": forged(HUGE), "raw-1e308": forged("1e308"), "raw-1e999": forged("1e999"),
            "ordinary": env_code(step="return 'ok', 1.0 if 'win' in action else 0.0, True, False, {}")}


def test_no_environment_can_make_a_return_an_advantage_or_the_loss_non_finite():
    """Plays of those environments (with a scripted agent) end with finite returns in [-1, 1]; the
    z-scored advantages and the policy loss over all of them are finite."""
    import torch
    import grpo
    import regret
    from agent import play
    from envs import Environment
    from backend import engine, models
    from test_agent import ScriptedEngine
    tokenizer = models.tiny_tokenizer()
    envs = [Environment(name, "Logical Deduction", code) for name, code in hostile_rewards().items()]
    scripted = ScriptedEngine(tokenizer, lambda prompt: "\\boxed{win}" if len(prompt) % 2 else "\\boxed{go}")
    episodes = play(envs, scripted, tokenizer, 2, params=engine.SamplingParams(temperature=1.0), max_turns=3,
                    max_new_tokens=16, timeout_s=5)
    returns = [e.reward for e in episodes]
    assert all(type(r) is float and -1.0 <= r <= 1.0 for r in returns), returns
    advantages = regret.episode_advantages(episodes)
    assert all(math.isfinite(a) for a in advantages), advantages
    shape = (len(episodes), 8)
    logprobs = torch.full(shape, -0.5, requires_grad=True)
    loss, _ = grpo.grpo_loss(logprobs, torch.full(shape, -0.6), torch.full(shape, -0.7), torch.tensor(advantages),
                             torch.ones(shape))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logprobs.grad).all()
    assert zygote_children() == []


# --- 17. a jail for a project and a virtualenv under /tmp or a closed home ---------------------
ELSEWHERE = """
import json, sys
import sandbox
code = sys.argv[1]
print(json.dumps(sandbox.isolation()), flush=True)
with sandbox.EnvSandbox(code, timeout_s=30) as box:
    print(box.reset()[0], flush=True)
"""
LOOK_AROUND = """
import getpass, only_in_this_project
wrote = []
for path in ('/var/tmp/x', '/dev/x', '/home/x'):
    try:
        open(path, 'w').close()
        wrote.append(path)
    except OSError:
        pass
return json.dumps([only_in_this_project.VALUE, getpass.getuser(), sorted(os.listdir('/dev')), wrote]), {}
"""


def project_and_venv_in(top):
    """A copy of the sandbox package and a module of the project's own in `top`/project, and a virtualenv
    in `top`/venv that sees this one's packages (numpy): its python, and the project."""
    project = top / "project"
    shutil.copytree(ROOT / "sandbox", project / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    (project / "only_in_this_project.py").write_text("VALUE = 'the project imports'\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(top / "venv")], check=True, timeout=120)
    site = next((top / "venv" / "lib").glob("python3*/site-packages"))
    (site / "trainer.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    return top / "venv" / "bin" / "python", project


@ROOT_ONLY
@JAILED
@pytest.mark.parametrize("where", ["tmp", "closed-home", "closed-dirs-in-tmp"])
def test_a_project_and_virtualenv_under_tmp_or_a_closed_home_are_jailed(where, tmp_path):
    """The project and its venv under /tmp (0755), under a 0700 home, or in pytest's 0700 directories
    under /tmp: the jail is built (no WARNING), the child imports the project's modules and the standard
    library's, and /var/tmp, /dev and /home stay read-only and bare."""
    top = {"tmp": pathlib.Path(f"/tmp/spade-test-{token()}"), "closed-home": pathlib.Path(f"/home/spade-test-{token()}"),
           "closed-dirs-in-tmp": tmp_path}[where]
    top.mkdir(exist_ok=True)
    top.chmod(0o755 if where == "tmp" else 0o700)
    try:
        python, project = project_and_venv_in(top)
        result = subprocess.run([str(python), "-c", ELSEWHERE, env_code(reset=LOOK_AROUND)], cwd=project,
                                capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})
        assert result.returncode == 0, result.stderr[-3000:]
        isolation, seen = result.stdout.splitlines()
        assert not json.loads(isolation)["jail"].startswith("missing"), isolation
        assert "WARNING" not in result.stderr, result.stderr[-2000:]
        value, user, dev, wrote = json.loads(seen)
        assert (value, user, wrote) == ("the project imports", "sandbox", [])
        assert set(dev) <= DEV_ALLOWED, dev
    finally:
        if top != tmp_path:
            shutil.rmtree(top, ignore_errors=True)


# --- 18. channels from one sandbox to the next --------------------------------------------------
# The number of a game drawn from os.urandom, published as an open-file-description lock on a
# world-readable host file: a process alive at the same time reads it back with F_OFD_GETLK.
LOCKED_NUMBER = """
import fcntl, struct
F_OFD_GETLK, F_OFD_SETLK = 36, 37
def _lock(fd, command, kind, start, length):
    return struct.unpack('hhqqi4x', fcntl.fcntl(fd, command, struct.pack('hhqqi4x', kind, 0, start, length, 0)))
def _published():
    fd = os.open('/etc/passwd', os.O_RDONLY)
    kind, _, start, _, _ = _lock(fd, F_OFD_GETLK, fcntl.F_WRLCK, 0, 0)   # the first lock on the file, if any
    if kind != fcntl.F_UNLCK:
        os.close(fd)
        return start
    number = 1 + int.from_bytes(os.urandom(4), 'big') % 10**6
    _lock(fd, F_OFD_SETLK, fcntl.F_RDLCK, number, 1)
    _held.append(fd)
    return number
_held = []
"""


def test_a_lock_on_a_host_file_does_not_carry_a_number_into_the_gates_second_process():
    """A game whose number comes from os.urandom and is published as a lock on a world-readable file
    for the gate's second process to read back: the determinism check sees two numbers."""
    code = env_code(top=LOCKED_NUMBER, init="self.number = _published()",
                    reset="return f'Guess my number (1 to a million). [{self.number}]', {}")
    result = validate_env(code, timeout_s=20)
    assert (result.ok, result.stage) == (False, "determinism"), result


def test_the_gate_compares_the_second_process_past_its_first_observation():
    """Construction and the first observation are deterministic, the probes' replies are not."""
    code = env_code(step="return f'you rolled {os.urandom(4).hex()}', 0.0, False, False, {}")
    result = validate_env(code, timeout_s=20)
    assert (result.ok, result.stage) == (False, "determinism"), result


CGROUP_COUNTERS = """
out = {}
line = [l for l in open('/proc/self/cgroup').read().splitlines() if l.split(':')[1] == 'memory'][0]
mine = '/sys/fs/cgroup/memory' + line.split(':', 2)[2]
for directory in (mine, os.path.dirname(mine)):
    for name in ('memory.max_usage_in_bytes', 'memory.memsw.max_usage_in_bytes', 'memory.usage_in_bytes'):
        try:
            out[os.path.join(directory, name)] = int(open(os.path.join(directory, name)).read())
        except (OSError, ValueError):
            pass
return json.dumps(out), {}
"""


@pytest.mark.parametrize("when", ["after", "beside"])
def test_a_child_cannot_read_another_childs_memory_use_from_the_cgroup_files(when):
    """A touches 192 MiB; B, started after A is gone (in A's slot) or while A holds them, reads every
    memory counter of its cgroup and of the parent: none shows A's 192 MiB."""
    if not sandbox._Zygote.get().cgroup or not os.path.exists("/sys/fs/cgroup/memory"):
        pytest.skip("no cgroup v1 memory controller here")
    hold = env_code(step="self.x = bytearray(192 << 20)\nself.x[::4096] = b'y' * len(self.x[::4096])\n"
                         "return 'holding', 0.0, False, False, {}")
    a = EnvSandbox(hold, timeout_s=10, memory_mb=512)
    a.reset()
    assert a.step("hold")[0] == "holding"
    if when == "after":
        a.close()
    try:
        with EnvSandbox(env_code(reset=CGROUP_COUNTERS), timeout_s=10) as b:
            seen = json.loads(b.reset()[0])
    finally:
        a.close()
    assert all(value < 128 << 20 for value in seen.values()), seen


# --- 19. machine-wide kernel quotas ----------------------------------------------------------
QUOTAS = {
    "aio": ("/proc/sys/fs/aio-nr", """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
self.contexts = []
while len(self.contexts) < 4096:
    context = ctypes.c_ulong(0)
    if libc.syscall(206 if os.uname().machine == 'x86_64' else 0, 1024, ctypes.byref(context)) != 0:
        break
    self.contexts.append(context)
return f'{len(self.contexts)} contexts', 0.0, False, False, {}"""),
    "pty": ("/proc/sys/kernel/pty/nr", """
self.ptys = []
try:
    while len(self.ptys) < 400:
        self.ptys.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))
except OSError:
    pass
return f'{len(self.ptys)} ptys', 0.0, False, False, {}"""),
}


def trainer_io_setup():
    """Whether this process can still get an AIO context of 128 events (then destroyed)."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("syscall numbers for x86_64 and aarch64")
    setup, destroy = (206, 207) if os.uname().machine == "x86_64" else (0, 1)
    context = ctypes.c_ulong(0)
    if libc.syscall(setup, 128, ctypes.byref(context)) != 0:
        return False
    libc.syscall(destroy, context)
    return True


@pytest.mark.parametrize("quota", sorted(QUOTAS))
def test_a_stopped_sandbox_holds_no_machine_wide_kernel_quota(quota):
    """The child takes all the AIO events (fs.aio-max-nr) or ptys it can and is stopped holding them: the
    machine's counters have not grown, and the trainer's own io_setup still works."""
    if quota == "pty":
        need_jail()   # the jail's /dev is its own; the host's /dev/ptmx reaches the kernel's ptys
    counter, grab = QUOTAS[quota]
    before = int(pathlib.Path(counter).read_text())
    with EnvSandbox(env_code(step=grab), timeout_s=10) as box:
        box.reset()
        took = box.step("grab")[0]
        assert int(pathlib.Path(counter).read_text()) <= before + 8, f"{took}: {counter} went up"
        assert quota != "aio" or trainer_io_setup(), f"{took}: the trainer's io_setup failed"


# --- 20. nothing outlives the trainer -------------------------------------------------------------
IMMORTAL = env_code(reset="import ctypes\nctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\nreturn 'cleared', {}")
DOOMED_TRAINER = """
import json, sys
import sandbox
box = sandbox.EnvSandbox(sys.argv[1], timeout_s=10)
print(json.dumps([box.reset()[0], box.pid]), flush=True)
sys.stdin.read()
"""


def descendants(pid):
    """Every live process below `pid`."""
    table = {p: parent for p, (parent, _) in processes().items()}
    below, grew = set(), True
    while grew:
        new = {p for p, parent in table.items() if (parent == pid or parent in below) and p not in below}
        below |= new
        grew = bool(new)
    return below


@pytest.mark.parametrize("killed", ["trainer", "trainer and fork server"])
def test_nothing_a_sandbox_started_outlives_a_killed_trainer(killed):
    """The child clears its parent-death signal; then the trainer is SIGKILLed (with its fork server,
    as a machine's OOM killer or a kill of the whole tree does it): within 5 s nothing that the trainer
    started (bubblewrap, the fork server, the sandbox) is left."""
    trainer = subprocess.Popen([sys.executable, "-c", DOOMED_TRAINER, IMMORTAL], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)
    started = set()
    try:
        said, child = json.loads(read_line(trainer))
        started = descendants(trainer.pid)
        assert said == "cleared" and child in started, (said, child, started)
        server = processes()[child][0]
        trainer.kill()
        if killed != "trainer":
            os.kill(server, 9)
        trainer.wait()
        assert settles(lambda: not started & set(processes()), within=5), \
            f"still running: {sorted(started & set(processes()))} (the sandbox: {child})"
    finally:
        trainer.kill()
        for pid in started & set(processes()):   # what a failure left behind
            _ignore(os.kill, pid, 9)


def _ignore(function, *args):
    try:
        function(*args)
    except OSError:
        pass


# --- 21. the run's state -----------------------------------------------------------------------
READ_RUN = """
seen = []
for path in {paths!r}:
    try:
        seen.append(open(path).read() if not os.path.isdir(path) else ' '.join(os.listdir(path)))
    except OSError as e:
        seen.append(type(e).__name__)
return json.dumps(seen), {{}}
"""


def write_run(run_dir):
    """What a run leaves in its directory, written as checkpoint.py and report.py write it: the paths."""
    secret = f"run-state-{token()}"
    (run_dir / "ckpt-00001").mkdir()
    (run_dir / "ckpt-00001" / "env_memory.json").write_text(json.dumps([secret]))
    (run_dir / "latest").write_text(json.dumps({"checkpoint": "ckpt-00001", "step": 1, "secret": secret}))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "secret": secret}) + "\n")
    return secret, [str(run_dir), str(run_dir / "latest"), str(run_dir / "metrics.jsonl"),
                    str(run_dir / "ckpt-00001" / "env_memory.json")]


@ROOT_ONLY
def test_a_run_directory_made_by_the_trainer_is_not_readable_from_a_sandbox():
    """A run directory anywhere (--out), claimed as spade.py claims it: a sandbox reads nothing in it."""
    from harness import checkpoint
    run_dir, held = ROOT / f"run-test-{token()}" / "run", len(checkpoint._LOCKS)
    try:
        checkpoint.claim(run_dir, resuming=False)
        secret, paths = write_run(run_dir)
        with EnvSandbox(env_code(reset=READ_RUN.format(paths=paths)), timeout_s=5) as box:
            seen = box.reset()[0]
        assert secret not in seen and "ckpt-00001" not in seen, seen
    finally:
        while len(checkpoint._LOCKS) > held:   # claim's lock, held for the process's life in a run
            checkpoint._LOCKS.pop().close()
        shutil.rmtree(run_dir.parent, ignore_errors=True)


@JAILED
def test_the_default_run_directory_is_hidden_from_a_sandbox():
    """out/ in the project (the default --out), here with a run directory and files any user may read,
    as a copied or older run has them: a trainer started in the project shows its sandboxes none of it."""
    out = ROOT / "out"
    made = not out.exists()
    run_dir = out / f"run-test-{token()}"
    try:
        run_dir.mkdir(parents=True)
        run_dir.chmod(0o755)
        secret, paths = write_run(run_dir)
        result = subprocess.run([sys.executable, "-c", ELSEWHERE, env_code(reset=READ_RUN.format(paths=paths))],
                                cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        seen = result.stdout.splitlines()[1]
        assert secret not in seen and run_dir.name not in seen, seen
    finally:
        shutil.rmtree(out if made else run_dir, ignore_errors=True)


# --- 22. what cannot fit the context is neither kept nor dumped -------------------------------------
def played(code, tokenizer, reply="\\boxed{1}", max_context=4096, **kwargs):
    """One play of `code` with a scripted engine (test_agent.ScriptedEngine, a TEST DOUBLE) and the
    real sandbox, tokenizer and chat template, as the trainer plays."""
    from agent import play
    from envs import Environment
    from backend import engine
    from test_agent import ScriptedEngine
    scripted = ScriptedEngine(tokenizer, lambda prompt: reply)
    [episode] = play([Environment("hostile", "Logical Deduction", code)], scripted, tokenizer, 1,
                     params=engine.SamplingParams(temperature=1.0), max_turns=3, max_context=max_context, **kwargs)
    return episode


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from backend import models
    return models.tiny_tokenizer()


def kept_chars(episode):
    return sum(len(m["content"]) for m in episode.messages)


TOOL_ENV = """
class HostileEnv(ToolUseBaseEnv):
    def reset(self, seed=None):
        self._tools = {"look": {"description": DESCRIPTION, "parameters": {"type": "object", "properties": {}}}}
        self._expected_answer = "done"
        return "Look around.", {}
    def tool_look(self):
        return RESULT
"""


@pytest.mark.parametrize("where", ["first observation", "step observation", "tool description"])
def test_text_that_cannot_fit_the_context_is_cut_before_it_is_tokenised(where, tiny_tokenizer, tmp_path):
    """900,000 characters where the context holds 4096 tokens: the play ends truncated (METHOD 4.1), and
    what the trainer keeps of it (its tokens, its transcript, its dump under samples/) stays within the
    context, plus the stated margin (chat.chars_per_token): two of the tokenizer's longest vocabulary
    entries in characters of transcript per token of context."""
    from harness.report import Log
    flood = "'a b ' * 225_000"
    code = {"first observation": env_code(reset=f"return {flood}, {{}}"),
            "step observation": env_code(step=f"return {flood}, 0.0, False, False, {{}}"),
            "tool description": TOOL_ENV.replace("DESCRIPTION", flood).replace("RESULT", "'seen'")}[where]
    started = time.monotonic()
    episode = played(code, tiny_tokenizer, "<answer>no</answer>" if "tool" in where else "\\boxed{1}")
    assert episode.status == "truncated" and episode.error is None, episode.error
    margin = 2 * 4096 * max(map(len, tiny_tokenizer.get_vocab()))
    assert len(episode.tokens) <= 4096 and kept_chars(episode) <= margin, (len(episode.tokens), kept_chars(episode))
    Log(tmp_path, SimpleNamespace(wandb=False)).plays(0, [episode], {})
    assert (tmp_path / "samples" / "step_00000" / "plays.json").stat().st_size <= margin + 4096
    assert time.monotonic() - started < 20


def test_a_reply_runs_and_keeps_only_the_tool_calls_whose_results_can_fit(tiny_tokenizer):
    """Four calls in one reply, each returning 500,000 characters, where the context holds 4096 tokens:
    the first result, cut, ends the play; the others are neither kept nor tokenised."""
    code = TOOL_ENV.replace("DESCRIPTION", "'Looks.'").replace("RESULT", "'seen ' * 100_000")
    calls = '<tool_call>{"name": "look", "arguments": {}}</tool_call>' * 4
    started = time.monotonic()
    episode = played(code, tiny_tokenizer, calls)
    tools = [m for m in episode.messages if m["role"] == "tool"]
    assert episode.status == "truncated" and len(tools) == 1, [len(m["content"]) for m in tools]
    assert len(episode.tokens) <= 4096 and kept_chars(episode) <= 2 * 4096 * 16
    assert time.monotonic() - started < 10


# --- 23. no control token of any tokenizer from an environment's text --------------------------------
def qwen3_style(tokenizer):
    """The tiny tokenizer with special added tokens that all_special_tokens does not list, as Qwen3's
    has (its <|vision_pad|>, <|fim_prefix|>, ...): a TEST FIXTURE, no real Qwen3 tokenizer being on disk."""
    import copy
    from tokenizers import AddedToken
    styled = copy.deepcopy(tokenizer)
    styled.add_tokens([AddedToken(t, special=True) for t in ("<|vision_pad|>", "<|fim_prefix|>", "<|box_start|>")])
    return styled


def smollm2_tokenizer():
    from transformers import AutoTokenizer
    from backend import models
    folder, file = os.path.split(models.resolve_model_name("smollm2-135m"))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    tokenizer.chat_template = models.CHAT_TEMPLATE
    return tokenizer


@pytest.mark.parametrize("which", ["qwen3-style", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_an_environment_writes_no_control_token_of_the_tokenizer(which, tiny_tokenizer):
    """An observation that spells every special added token of the tokenizer (SmolLM2 lists 3 of its 17
    in all_special_tokens): the play's tokens hold each control id exactly as often as the same play
    with a blank observation, so every one of them was written by the chat template."""
    tokenizer = qwen3_style(tiny_tokenizer) if which == "qwen3-style" else smollm2_tokenizer()
    specials = {t.content: i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    assert len(specials) > len(tokenizer.all_special_tokens)
    spelled = played(env_code(reset=f"return {' x '.join(specials)!r}, {{}}"), tokenizer)
    blank = played(env_code(reset="return 'x', {}"), tokenizer)
    assert spelled.num_turns == blank.num_turns == 3
    counts = lambda episode: {t: episode.tokens.count(i) for t, i in specials.items()}
    assert counts(spelled) == counts(blank)


# --- 24. a sandbox's identity tells it nothing about its slot or its trainer ---------------------------
IDENTITIES = {   # __init__ snippets that set self.key from what could tell a sandbox apart
    "uid": "self.key = str(os.getuid())",
    "cgroup path": "self.key = open('/proc/self/cgroup').read()",
    "mount table": "self.key = ' '.join(' '.join(l.split(' - ')[0].split()[3:5]) for l in open('/proc/self/mountinfo'))",
    "command line": "self.key = open('/proc/self/cmdline', 'rb').read().decode(errors='replace')",
    "live siblings": """
        import gc
        frame, self.key = sys._getframe(), ''
        while frame is not None:   # the fork server's frames and their locals, were they still there
            self.key += str(len(frame.f_locals.get('children', ()))) + ' '
            frame = frame.f_back
        self.key += str(sum(1 for o in gc.get_objects() if type(o) is dict and 'oom_kills' in o))""",
}


@ROOT_ONLY
@pytest.mark.parametrize("identity", sorted(IDENTITIES))
def test_a_game_keyed_on_its_sandboxs_identity_passes_the_gate_only_if_every_play_agrees(identity):
    """A game whose instance is drawn from what tells its sandbox apart: the gate rejects it, or three
    plays with one seed side by side, and one on another trainer (a rank of its own), get one instance."""
    code = env_code(init=IDENTITIES[identity],
                    reset="return 'Instance ' + str(sum(map(ord, self.key))), {}")
    result = validate_env(code, timeout_s=30)
    if not result.ok:
        assert result.stage == "determinism", result
        return
    with EnvSandbox(code) as a, EnvSandbox(code) as b, EnvSandbox(code) as c:
        seen = {box.reset(seed=7)[0] for box in (a, b, c)}
    other = subprocess.run([sys.executable, "-c", OTHER_TRAINER, str(ROOT), code], cwd=ROOT, input="", text=True,
                           capture_output=True, timeout=120)
    seen.add(json.loads(other.stdout.splitlines()[0])["uid"])
    assert len(seen) == 1, seen


def test_a_game_keyed_on_the_device_of_its_tmp_does_not_pass_the_gate():
    """The kernel numbers each sandbox's /tmp (a tmpfs of its own), and gives a number back once it is
    free: the gate's two processes live side by side, as plays do, so they never share one."""
    code = env_code(init="self.key = os.stat('/tmp').st_dev", reset="return f'Instance {self.key}', {}")
    for _ in range(3):
        result = validate_env(code, timeout_s=30)
        assert (result.ok, result.stage) == (False, "determinism"), result


# --- 25. the determinism check compares the tool list ---------------------------------------------
def test_a_tool_list_drawn_per_process_does_not_pass_the_gate():
    code = TOOL_ENV.replace("DESCRIPTION", "'Looks at ' + os.urandom(4).hex()").replace("RESULT", "'seen'")
    result = validate_env("import os\n" + code, timeout_s=30)
    assert (result.ok, result.stage) == (False, "determinism") and "tool list" in result.error, result


# --- 26. what an environment wrote reaches the log printable -----------------------------------------
def test_terminal_control_sequences_of_an_environment_do_not_reach_the_log(tmp_path, capsys):
    """An exception at load whose message clears the screen, retitles the terminal and forges a step
    line: the trainer prints the pool's WARNING and the designer's rejection line escaped."""
    from designer import rejection_line
    from envs import load_pool
    forged = "\x1b[2J\x1b]0;owned\x07\nstep  999 | forged\x9b1A"
    (tmp_path / "hostile_logical_deduction.py").write_text(env_code(top=f"raise ValueError({forged!r})"))
    (tmp_path / "vault_dial_logical_deduction.py").write_text((ROOT / "tests/fixtures/examples/vault_dial.py").read_text())
    load_pool(tmp_path)
    result = validate_env(env_code(top=f"raise ValueError({forged!r})"))
    print(rejection_line({"slot": 0, "skill": "Logical Deduction", "attempt": 1, "stage": result.stage,
                          "error": result.error}, 5))
    printed = capsys.readouterr().out
    assert not any(ch in printed for ch in "\x1b\x07\x9b") and "owned" in printed and "forged" in printed
    assert not any(line.startswith("step") for line in printed.splitlines()), printed


# --- 27. the trainer's send side never takes SIGPIPE ----------------------------------------------------
HALF_CLOSED = """
import signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # as a process that embeds the trainer may have it
sys.path[:0] = [sys.argv[1]]
from sandbox import EnvSandbox, SandboxError
box = EnvSandbox(sys.argv[2], timeout_s=5)
print(box.reset()[0], flush=True)
try:
    box.step("go")
except SandboxError as e:
    print(e.kind, flush=True)
"""
# reset() shuts its reply socket's reading side, then answers itself there (in that order: the trainer
# stops the child once it has its reply) and leaves the request loop a socket pair of its own to wait on:
# the child lives on, and the trainer's next request is sent to a socket that reads no more.
SHUT_READING = """
real = os.dup(reply_fd())
_socket.socket(fileno=os.dup(real)).shutdown(_socket.SHUT_RD)
write_frame({'id': 1, 'ok': True, 'value': ['half-closed', {}, ['str', 'dict']]})
a, b = _socket.socketpair()
self.kept = (real, a, b)
os.dup2(a.fileno(), 3)
return 'unused', {}
"""


def test_a_sandbox_that_shuts_its_reading_side_is_an_error_not_a_signal():
    """The trainer's send to a half-closed socket is an error (BrokenPipeError, a crash of that sandbox),
    never SIGPIPE, also in a trainer that takes SIGPIPE by default."""
    result = subprocess.run([sys.executable, "-c", HALF_CLOSED, str(ROOT), wire_env(reset=SHUT_READING)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout.split()) == (0, ["half-closed", "crash"]), result.stderr[-2000:]
