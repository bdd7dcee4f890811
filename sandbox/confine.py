"""How a sandbox child is cut off from the machine: a jail for the fork server, then per child its own
namespaces, scratch space, memory cgroup, uid, keyring and system-call filter (what they protect
against, and what they do not: sandbox/__init__.py's docstring).

- In the trainer, `jail(...)` is the bubblewrap command the fork server runs under, as the init of its
  own PID namespace: a read-only view of the host in which /tmp, /var/tmp, /run, /home, /root and the
  default run directories are empty but for the interpreter's, the project's and sys.path's
  directories (bound back read-only), a minimal /dev, its own IPC, UTS and network namespaces and six
  capabilities (CAPABILITIES). `claim_uids()` and `memory_cgroup()` also run here.
- In the fork server, every child calls `confine_child(...)` first, before it reads a byte of
  environment code: a private /tmp, no devpts, its memory cgroup (and no cgroup file or path), its uid
  (which every child reads as SEEN_UID), a fresh keyring, no capabilities and the seccomp filter.
Linux only. Where a layer is not available here, the others still hold and sandbox.isolation() says
which is missing.
"""
import ctypes
import fcntl
import os
import platform
import re
import resource
import shutil
import signal
import stat
import struct
from contextlib import suppress

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 24, 38, 22
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# A library loaded after the fork (torch's OpenMP) sizes its thread pool by these; with no threads
# allowed, anything but 1 makes it exit.
ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")
SCRATCH_MB = 64                    # the child's one writable place: /tmp, also mounted on /dev/shm
JAIL_TMP_MB = 256                  # the fork server's own /tmp (work directories where namespaces fail)
UID_BASE, UID_BLOCK, UID_BLOCKS = 0x7000_0000, 1 << 16, 256   # above the usual user and container ranges
SEEN_UID = 1000                    # the uid and gid every child reads as its own (a user namespace maps it)
HIDDEN = ("/home", "/root", "/tmp", "/var/tmp", "/run")       # empty in the jail (secrets, host sockets)
CGROUPS = "/sys/fs/cgroup"                                     # empty for a child once it is in its cgroup
CAPABILITIES = ("SYS_ADMIN", "SETUID", "SETGID", "SETPCAP", "CHOWN", "KILL")   # the fork server's only ones


def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


# ---------------------------------------------------------------------------------------------
# In the trainer: the fork server's jail, its uids and its memory cgroup.
# ---------------------------------------------------------------------------------------------
def jail(readable, writable=(), private=()):
    """The bubblewrap command to put before the fork server's (it ends in "--") and its description,
    or (None, why not). `readable` are the paths the fork server needs (interpreter, packages,
    project); `writable` its cgroup directory; `private` directories to empty (runs' state). The
    emptied directories and /dev are read-only tmpfs: nothing a child writes there outlives it."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    # --as-pid-1: the fork server is the jail's init, so when it dies, however it dies, the kernel kills every
    # process of the jail, the sandboxes among them (under bubblewrap's own init, a sandbox that cleared
    # its parent-death signal lived on). Not --die-with-parent: the death of the thread that ran it.
    command = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
               "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-net", "--unshare-uts",
               "--new-session", "--cap-drop", "ALL"]
    for capability in CAPABILITIES:
        command += ["--cap-add", f"CAP_{capability}"]
    if os.getuid() != 0:   # bubblewrap's own user namespace gives the fork server these capabilities
        command += ["--unshare-user", "--uid", "0", "--gid", "0"]
    hidden = sorted(p for p in {*HIDDEN, *map(_closed_ancestor, readable)} if p and os.path.isdir(p))
    for path in hidden:
        command += ["--size", str((JAIL_TMP_MB if path == "/tmp" else 1) * 2**20), "--tmpfs", path]
    for path in _outermost(readable):
        top = next((h for h in hidden if _within(path, h)), None)
        if top is not None:   # parents that the tmpfs lacks, traversable by the child's uid
            for parent in [p for p in _ancestors(path) if _within(p, top) and p != top]:
                command += ["--perms", "0755", "--dir", parent]
            command += ["--ro-bind", path, path]
    for path in writable:
        command += ["--bind", path, path]
    private = sorted({os.path.realpath(p) for p in private if os.path.isdir(p)} - {"/"})
    for path in private:
        command += ["--size", "4096", "--tmpfs", path]
    for path in [p for p in hidden if p != "/tmp"] + private + ["/dev"]:
        command += ["--remount-ro", path]
    return command + ["--"], f"bubblewrap {_bwrap_version(bwrap)}"


def rebound(readable):
    """The readable paths under /tmp, which a child's private /tmp hides: it binds them back."""
    return [p for p in _outermost(readable) if _within(p, "/tmp")]


def _within(path, top):
    return path == top or path.startswith(top.rstrip("/") + "/")


def _ancestors(path):
    """'/a/b/c' -> ['/a', '/a/b']"""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _closed_ancestor(path):
    """The outermost directory above `path` that other users cannot enter (a 0700 home), or None."""
    with suppress(OSError):
        for parent in _ancestors(path):
            if not os.stat(parent).st_mode & 0o001:
                return parent
    return None


def _outermost(paths):
    """The existing paths, each only once and not inside another one. "/" and the emptied directories
    themselves are never bound whole (a script run from /tmp puts /tmp on sys.path): they stay empty."""
    real = sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)} - {"/", *HIDDEN})
    return [p for p in real if not any(q != p and _within(p, q) for q in real)]


def _bwrap_version(bwrap):
    import subprocess
    with suppress(OSError, IndexError, subprocess.SubprocessError):
        return subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.split()[-1]
    return "?"


def claim_uids():
    """A block of UID_BLOCK uids that no other fork server on this machine uses (among those that see
    the same /run): (lock fd, first uid). The flock lasts as long as the trainer keeps the fd open."""
    locks = "/run/spade-sandbox-uids" if os.path.isdir("/run") else "/tmp/spade-sandbox-uids"
    os.makedirs(locks, mode=0o700, exist_ok=True)
    info = os.lstat(locks)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise RuntimeError(f"{locks} is not a directory of ours that only we can write: remove it")
    for block in range(UID_BLOCKS):
        fd = os.open(os.path.join(locks, str(block)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, UID_BASE + block * UID_BLOCK
        except BlockingIOError:
            os.close(fd)
    raise RuntimeError(f"all {UID_BLOCKS} sandbox uid blocks are taken ({locks})")


def memory_cgroup():
    """A fresh memory cgroup below the trainer's own, under which every sandbox child gets one: (its
    directory, "cgroup v1" or "cgroup v2"), or (None, why not). v2 needs the memory controller
    delegated to the trainer's cgroup."""
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
        mounts = [line.split() for line in open("/proc/self/mounts")]
    except OSError as e:
        return None, f"cannot read the cgroups: {e}"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        version = 1 if "memory" in controllers.split(",") else 2 if controllers == "" else None
        for _, mountpoint, fstype, options, *_ in mounts:
            ours = (fstype == "cgroup" and "memory" in options.split(",")) if version == 1 else \
                   (version == 2 and fstype == "cgroup2")
            parent = mountpoint + path.rstrip("/")
            # Another controller, our cgroup not where the path says (a cgroup namespace), or memory not delegated
            if not ours or not os.path.isdir(parent) or (
                    version == 2 and "memory" not in _read(os.path.join(parent, "cgroup.subtree_control")).split()):
                continue
            _sweep(parent)
            directory = os.path.join(parent, f"spade-sandbox-{os.getpid()}")
            try:
                os.makedirs(directory, exist_ok=True)
                if version == 2:   # its children (one per sandbox) need the controller too
                    _write(os.path.join(directory, "cgroup.subtree_control"), "+memory")
            except OSError as e:
                return None, f"cannot create a memory cgroup in {parent}: {e.strerror}"
            return directory, f"cgroup v{version}"
    return None, "no memory cgroup to use (cgroup v1's memory controller, or v2 with memory delegated to us)"


def _sweep(parent):
    """Remove the empty cgroups of fork servers whose trainer is gone (killed before it could)."""
    with suppress(OSError):
        stale = [e.path for e in os.scandir(parent) if e.name.startswith("spade-sandbox-")
                 and e.name[14:].isdigit() and not _alive(int(e.name[14:]))]
        for directory in stale:
            remove_cgroup(directory)


def _alive(pid):
    try:
        with suppress(PermissionError):   # another user's
            os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _read(path):
    with suppress(OSError), open(path) as f:
        return f.read()
    return ""


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def remove_cgroup(directory):
    """rmdir an empty cgroup and the empty ones in it, a fork server's slots (what they still have charged
    the kernel moves to their parent). One level only: what a child may have made below its slot stays,
    with the slot (no recursion a child could make deep)."""
    with suppress(OSError):
        for child in os.scandir(directory):
            if child.is_dir():
                with suppress(OSError):
                    os.rmdir(child.path)
        os.rmdir(directory)


def charged(directory):
    """The bytes charged to a memory cgroup (v1 memory.usage_in_bytes, v2 memory.current); 0 if unreadable."""
    for name in ("memory.usage_in_bytes", "memory.current"):
        text = _read(os.path.join(directory, name)).strip()
        if text.isdigit():
            return int(text)
    return 0


def oom_kills(directory):
    """How many processes the memory cgroup has killed (v1 memory.oom_control, v2 memory.events)."""
    for name in ("memory.oom_control", "memory.events"):
        for line in _read(os.path.join(directory, name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return 0


# ---------------------------------------------------------------------------------------------
# In the freshly forked child, with the fork server's privileges, before any environment code.
# ---------------------------------------------------------------------------------------------
def confine_child(spec):
    """Confine this process as `spec` says (forkserver.py fills it in from the layers it found
    working). A step that fails raises, and the child then exits without running anything."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    uid, workdir = spec["uid"], spec["workdir"]
    if spec["namespaces"]:   # mount, IPC, network, UTS; the PID namespace is the fork server's unshare
        _private_mounts(spec["rebound"])
    if spec["cgroup"]:
        _enter_cgroup(spec["cgroup"], spec["memory_limit"])
    if spec["namespaces"]:
        _hide_cgroups()
    _write("/proc/self/oom_score_adj", "1000")   # the machine's OOM killer takes a sandbox before the trainer
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a too-large file write raises, not kills
    # Without a memory cgroup only files bound the memfds RLIMIT_AS does not count: 64 of 16 MiB.
    files, file_mb = (256, SCRATCH_MB) if spec["cgroup"] else (64, 16)
    limits = {resource.RLIMIT_AS: spec["address_space"], resource.RLIMIT_FSIZE: file_mb * 2**20,
              resource.RLIMIT_NOFILE: files, resource.RLIMIT_NPROC: 0, resource.RLIMIT_CORE: 0,
              resource.RLIMIT_MSGQUEUE: 0}
    for limit, value in limits.items():
        resource.setrlimit(limit, (value, value))
    _drop_bounding_set()
    if spec["setuid"]:
        os.chown(workdir, uid, uid)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if spec["userns"]:
        _seen_as(SEEN_UID, uid)
    if ARCH is not None:   # none left: effective, permitted, inheritable, ambient (setresuid keeps two)
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        header = struct.pack("Ii", 0x20080522, 0)   # _LINUX_CAPABILITY_VERSION_3, this process
        check(libc.syscall(ARCH[1]["capset"], header, bytes(24)), "capset")
    # KEYCTL_JOIN_SESSION_KEYRING: a fresh, empty session keyring (the number is per arch)
    if spec["seccomp"] and libc.syscall(ARCH[1]["keyctl"], 1, None) < 0:
        check(-1, "keyctl(KEYCTL_JOIN_SESSION_KEYRING)")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")        # setuid binaries stay us
    check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(DUMPABLE)")                 # no /proc/<pid>/mem
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")  # dies with the fork server
    if spec["seccomp"]:
        install_seccomp()
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(PATH="/usr/bin:/bin", HOME=workdir, TMPDIR=workdir, USER="sandbox", LOGNAME="sandbox",
                      **dict.fromkeys(ONE_THREAD, "1"))


def _private_mounts(rebound):
    """New namespaces; a private tmpfs on /tmp (and /dev/shm), with the `rebound` paths that lived
    under /tmp bound back read-only; a /proc of the child's own PID namespace. The tmpfs stays root's
    while the mount points are made in it (the jail grants no CAP_DAC_OVERRIDE, so one already the
    child's, mode 0700, refused them); confine_child gives it to the child's uid afterwards."""
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS), "unshare")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    sources = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in rebound]   # before the tmpfs hides them
    options = f"size={SCRATCH_MB}m,mode=0700".encode()
    check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options), "mount /tmp")
    for path, fd in zip(rebound, sources):
        os.makedirs(path, mode=0o755, exist_ok=True)
        _read_only(path, f"/proc/self/fd/{fd}")
        os.close(fd)
    check(libc.mount(b"/tmp", b"/dev/shm", None, MS_BIND, None), "mount /dev/shm")
    check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
    # No devpts: /dev/ptmx then opens nothing, and a stopped child holds none of kernel.pty.max (EINVAL
    # where /dev/pts is no mount: nothing to take away).
    libc.umount2(b"/dev/pts", MNT_DETACH)


def _hide_cgroups():
    """Once in its memory cgroup (or with none), the child sees no cgroup: a cgroup namespace of its
    own, so its path reads "/" (it named the trainer's pid and the child's slot), and no cgroup file
    system in its mount table (the jail's bind of the trainer's cgroup named them too). Their files
    would carry values from one sandbox to another: a slot's peak and page-fault counters, which
    outlive a child, and the usage of the sandboxes beside it. A mount that cannot be detached (a jail
    in a user namespace locks what it inherited) is covered by a read-only tmpfs under CGROUPS and
    made read-only elsewhere (where the child owns its cgroup's files, v2 delegated to a user, it could
    otherwise raise its own limit)."""
    check(libc.unshare(CLONE_NEWCGROUP), "unshare(CLONE_NEWCGROUP)")
    libc.umount2(CGROUPS.encode(), MNT_DETACH)   # with every hierarchy mounted below it
    elsewhere = _cgroup_mounts()
    for path in elsewhere:
        libc.umount2(path.encode(), MNT_DETACH)
    left = _cgroup_mounts() if elsewhere else []
    for path in [p for p in left if not _within(p, CGROUPS)]:
        _read_only(path)
    if any(_within(p, CGROUPS) for p in left):
        check(libc.mount(b"tmpfs", CGROUPS.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k"),
              f"mount {CGROUPS}")


def _cgroup_mounts():
    """The mount points of the cgroup file systems in this mount namespace (mountinfo's octal escapes undone)."""
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]   # the file system type follows the lone "-"
    return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]) for fields in mounts
            if fields[fields.index("-") + 1] in ("cgroup", "cgroup2")]


def _seen_as(seen, uid):
    """A user namespace in which this process's `uid` (and gid) reads as `seen`: every child reads the
    same, so none can tell its slot from its uid. Its other namespaces, made before it, belong to the
    jail's user namespace, so the capabilities it gets in its own rule over none of them; they are
    dropped next. Dumpable for a moment: setresuid gave /proc/self to root, and only the process itself
    may write its maps."""
    check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(DUMPABLE)")
    check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    for name, line in (("setgroups", "deny"), ("uid_map", f"{seen} {uid} 1"), ("gid_map", f"{seen} {uid} 1")):
        _write(f"/proc/self/{name}", line)
    _drop_bounding_set()   # a new user namespace starts with a full one


def _drop_bounding_set():
    """An empty capability bounding set: no exec gives any capability back."""
    for capability in range(64):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)   # EINVAL past the last one: harmless


def _read_only(path, source=None):
    """Bind `source` (else `path` itself) onto `path`, read-only, in this mount namespace."""
    check(libc.mount((source or path).encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
    check(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None), f"remount {path} ro")


def _enter_cgroup(directory, limit):
    """Enter this child's memory cgroup (made by the first child of its slot) with this child's limit.
    It counts what RLIMIT_AS does not: shared memory (memfd, SysV, the scratch tmpfs) and kernel memory."""
    os.makedirs(directory, exist_ok=True)
    v1 = os.path.exists(os.path.join(directory, "memory.limit_in_bytes"))
    if not v1 and not os.path.exists(os.path.join(directory, "memory.max")):
        raise OSError(f"{directory} has no memory limit (the memory controller is not enabled there)")
    limit = -(-limit // 2**24) * 2**24   # whole 16 MiB: mostly the limit its slot already has
    if _read(os.path.join(directory, "memory.limit_in_bytes" if v1 else "memory.max")).strip() != str(limit):
        settings = ([("memory.memsw.limit_in_bytes", -1), ("memory.limit_in_bytes", limit),   # memsw >= limit
                     ("memory.memsw.limit_in_bytes", limit)] if v1 else [("memory.max", limit), ("memory.swap.max", 0)])
        for name, value in settings:
            path = os.path.join(directory, name)
            if os.path.exists(path):   # memsw exists only with swap accounting
                _write(path, str(value))
    # v1: "0" into `tasks` moves this thread only, which skips the global lock that moving a whole
    # process takes (its write side waits for an RCU grace period: ~10 ms after the machine was idle).
    _write(os.path.join(directory, "tasks" if v1 else "cgroup.procs"), "0")


# ---------------------------------------------------------------------------------------------
# The system-call filter: a short deny list in classic BPF, as nsjail and bubblewrap callers use.
# ---------------------------------------------------------------------------------------------
# (AUDIT_ARCH, {name: number}) per architecture: the calls the filter refuses, and capset and keyctl, which
# confine_child makes itself. socket() is refused outright (no host sockets, not even a pathname unix
# socket under a read-only bind); clone3 as not implemented (glibc then uses clone, whose flags the filter
# can read: no CLONE_NEWUSER); prctl only to set the parent-death signal (a child that cleared it outlived
# its fork server); the rest are kernel attack surface an environment never needs (new user namespaces,
# io_uring, which bypasses seccomp, userfaultfd, perf events, ptrace, keys), per-user quotas it would share
# with the trainer where it runs as its uid (inotify, fanotify), or a machine-wide one that a stopped child
# could hold (io_setup: fs.aio-max-nr's events, which the trainer's own AIO then lacks).
ARCHES = {
    "x86_64": (0xC000003E, dict(capset=126, keyctl=250, socket=41, clone=56, clone3=435, prctl=157, ptrace=101,
                                add_key=248, request_key=249, unshare=272, perf_event_open=298, bpf=321, userfaultfd=323,
                                io_uring_setup=425, io_uring_enter=426, io_uring_register=427, inotify_init=253,
                                inotify_init1=294, fanotify_init=300, io_setup=206)),
    "aarch64": (0xC00000B7, dict(capset=91, keyctl=219, socket=198, clone=220, clone3=435, prctl=167, ptrace=117,
                                 add_key=217, request_key=218, unshare=97, perf_event_open=241, bpf=280, userfaultfd=282,
                                 io_uring_setup=425, io_uring_enter=426, io_uring_register=427, inotify_init1=26,
                                 fanotify_init=262, io_setup=0)),
}
ARCH = ARCHES.get(platform.machine())


def install_seccomp():
    """Refuse the deny list with EPERM (EACCES for socket, ENOSYS for clone3, EPERM for a clone with
    CLONE_NEWUSER and for prctl(PR_SET_PDEATHSIG)), and every call of a foreign ABI (32-bit int 0x80 on
    x86_64, x32), for this process and everything it execs."""
    arch, numbers = ARCH
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    ALLOW, EPERM, EACCES, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 13, 0x00050000 | 38
    program = [(LD, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, EPERM),      # arch: foreign ABI -> EPERM
               (LD, 0, 0, 0), (JGE, 0, 1, 0x40000000), (RET, 0, 0, EPERM),   # x32 syscall numbers
               (JEQ, 0, 1, numbers["socket"]), (RET, 0, 0, EACCES),
               (JEQ, 0, 1, numbers["clone3"]), (RET, 0, 0, ENOSYS)]
    for name, number in numbers.items():
        if name not in ("capset", "socket", "clone", "clone3", "prctl"):   # capset may only drop: allowed
            program += [(JEQ, 0, 1, number), (RET, 0, 0, EPERM)]
    program += [(JEQ, 0, 4, numbers["clone"]), (LD, 0, 0, 16),            # clone: its flags (args[0], low half)
                (JSET, 0, 1, CLONE_NEWUSER), (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW),
                (JEQ, 0, 3, numbers["prctl"]), (LD, 0, 0, 16),            # prctl: its option (args[0])
                (JEQ, 0, 1, PR_SET_PDEATHSIG), (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW)]
    filters = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(filters)
    fprog = struct.pack("HxxxxxxQ", len(program), ctypes.addressof(buffer))
    check(libc.prctl(PR_SET_SECCOMP, 2, ctypes.c_char_p(fprog), 0, 0), "prctl(SECCOMP)")
