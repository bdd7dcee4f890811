"""How a sandbox child is cut off from the machine: namespaces, rlimits, its own uid, no secrets.

sandbox.py's fork server calls `isolate_zygote()` once, before it forks anything, and every child
it forks calls `confine_child(...)` first, as root, before it reads a byte of environment code.
What the two together protect against, and what they do not, is sandbox.py's module docstring.
Linux only (unshare, mount and prctl through libc).
"""
import ctypes
import os
import signal
import socket

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
PR_SET_PDEATHSIG, MS_REC, MS_PRIVATE = 1, 16384, 1 << 18


def isolate_zygote():
    """Enter new network (and mount) namespaces where the kernel allows; return what we got."""
    if os.getuid() == 0 and _libc.unshare(CLONE_NEWNET | CLONE_NEWNS) == 0:
        _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
        for path in (b"/tmp", b"/dev/shm"):
            _libc.mount(b"tmpfs", path, b"tmpfs", 0, b"size=256m,mode=1777")
        return "network+mount namespaces"
    if os.getuid() != 0 and _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        return "network namespace (user namespace)"
    return "socket layer"


def _refuse_sockets():
    """The fallback when no network namespace could be made: connecting and binding refuse."""
    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the sandbox")
    for name in ("connect", "connect_ex", "bind", "sendto"):
        setattr(socket.socket, name, refuse)
    socket.create_connection = socket.getaddrinfo = refuse


def confine_child(uid, memory_mb, workdir, isolation):
    """In the freshly forked child, as root: limits, identity, directory, then drop privileges."""
    import resource
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a too-large file write raises, not kills
    vm_bytes = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limits = {resource.RLIMIT_AS: vm_bytes + memory_mb * 2**20, resource.RLIMIT_FSIZE: 16 * 2**20,
              resource.RLIMIT_NOFILE: 64, resource.RLIMIT_NPROC: 0, resource.RLIMIT_CORE: 0}
    for limit, value in limits.items():
        resource.setrlimit(limit, (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (3600, 3600))
    if os.getuid() == 0:
        os.chown(workdir, uid, uid)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)    # dies with the zygote (after setuid: it resets)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(PATH="/usr/bin:/bin", HOME=workdir, TMPDIR=workdir)
    if isolation == "socket layer":
        _refuse_sockets()
