"""The processes of one run: one rank per GPU, dividing a phase's work between them, and Ctrl-C obeyed by all.

`python spade.py` on a node with several GPUs starts itself once per GPU (`as_ranks`, `launch_ranks`) with
torchrun's environment; the ranks share the terminal's process group, so a Ctrl-C reaches each, and a
rank that dies stops the others. `divide` gives each rank its `share` of a phase's items (plays, designer
slots, hints), balanced by their expected length, and `gather` hands every rank all the results in one
order. That needs an engine that can generate alone: the in-process engine holds a sharded model whole
for the phase; vLLM's ranks form tensor-parallel groups (`TensorParallelGroup`). Where neither can, every
rank plays everything in lockstep and `RankAgreement` checks that they ask for the same prompts. Whether
to stop after a step is decided by all ranks together (`agreed`).

    >>> rank_environment(1, 4, 29500)["LOCAL_RANK"], rank_environment(1, 4, 29500)["WORLD_SIZE"]
    ('1', '4')
"""
import array
import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path


def rank_environment(rank: int, world: int, port: int) -> dict[str, str]:
    """What torchrun sets for a rank of a one-node run (OMP_NUM_THREADS=1 as torchrun does, unless set)."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(argv: list[str], world: int, script: str, poll_s: float = 0.5) -> int:
    """Run `python script argv` as `world` ranks of this node; returns a failed rank's exit status (the
    lowest-numbered seen failed), or 0. Ctrl-C is left to the ranks (they share this process group); a
    SIGINT sent to this process alone is passed on to them as a first Ctrl-C (SIGUSR1). Only rank 0
    prints (every rank holds the whole step's results: `gather`); every rank's errors (stderr) are shown."""
    port = free_port()
    usr1 = signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # inherited: ignored until install_sigint_handler
    ranks = [subprocess.Popen([sys.executable, script, *argv], env={**os.environ, **rank_environment(r, world, port)},
                              stdout=None if r == 0 else subprocess.DEVNULL)   # the others' would repeat it
             for r in range(world)]
    signal.signal(signal.SIGUSR1, usr1)
    # After the ranks started, so that they do not inherit them: `kill` leaves no orphans, and SIGINT
    # is taken here only by sigtimedwait (_supervise), so that a terminal's is told from kill()'s.
    term = signal.signal(signal.SIGTERM, lambda signum, frame: [rank.terminate() for rank in ranks])
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        failed = _supervise(ranks, poll_s)
    finally:
        while signal.sigtimedwait({signal.SIGINT}, 0) is not None:   # taken here, never delivered later
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGTERM, term)
    if not failed:
        return 0
    rank, code = failed[0]
    how = (f"exited with status {code}" if code > 0 else
           f"was killed by signal {-code} ({signal.strsignal(-code) or 'unknown'})")
    print(f"launch: rank {rank} {how}; stopped the others", file=sys.stderr, flush=True)
    return code if code > 0 else 128 - code   # killed by signal N: 128 + N


def _supervise(ranks, poll_s):
    """Wait until every rank has exited 0 or one has failed, then stop the others (they would wait for it
    forever); [(rank, status)] of the failed. A SIGINT that kill() sent to this process (si_code
    SI_USER, 0) goes on to the ranks as SIGUSR1; a terminal's (SI_KERNEL) has reached them already."""
    while True:
        codes = [rank.poll() for rank in ranks]
        failed = [(r, code) for r, code in enumerate(codes) if code not in (None, 0)]
        if failed or all(code == 0 for code in codes):
            break
        interrupt = signal.sigtimedwait({signal.SIGINT}, poll_s)
        if interrupt is not None and interrupt.si_code == 0:
            for rank in ranks:
                rank.send_signal(signal.SIGUSR1)   # Popen signals only a rank that has not exited
    for rank in ranks:
        rank.terminate()
    for rank in ranks:
        try:
            rank.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rank.kill()
            rank.wait()
    return failed


def as_ranks(argv, script):
    """Where this process is not a rank and sees several GPUs: start one rank per GPU and return the exit
    status to end with; None where this process is the run (or one of its ranks). GPUs that are visible but
    unusable stop the run here, before anything loads (`usable_gpus`)."""
    # Trap (torch 2.13 + torchao 0.18), where the memory plan takes torchao's compiled 8-bit AdamW on
    # FSDP2: AOT autograd's on-disk cache mixes up the DTensor-wrapped 8-bit optimizer states, so every run
    # after the first on a machine dies in optimizer.step ("'Tensor' object has no attribute 'codes'").
    # Read once, when torch is imported: set it first.
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    gpus = usable_gpus()
    if "RANK" in os.environ or gpus < 2:
        return None
    print(f"spade.py: {gpus} GPUs: starting one rank per GPU (CUDA_VISIBLE_DEVICES=0 for one)", flush=True)
    return launch_ranks(argv, gpus, script)


def usable_gpus() -> int:
    """The GPUs this process can use. Visible ones that CUDA cannot use (the driver too old for this torch's
    CUDA, say: NVML still counts them) stop the run in one sentence; running on the CPU instead would load
    the model in fp32 on every rank and train for days without a word."""
    import torch
    visible = torch.cuda.device_count()   # NVML's count, where it answers: without initialising CUDA
    if visible == 0 or torch.cuda.is_available():
        return visible
    try:
        torch.cuda.init()
        cause = "CUDA reports no usable device"
    except (RuntimeError, AssertionError) as e:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise SystemExit(f"spade.py: {visible} GPU{'s' * (visible > 1)} visible but CUDA cannot use them (torch "
                     f"{torch.__version__}, built for CUDA {torch.version.cuda}): {cause}; update the NVIDIA "
                     f"driver or install a torch built for it, or set CUDA_VISIBLE_DEVICES= to run on the CPU")


def setup_distributed():
    """(rank, world size) of this process; joins the process group when started as a rank. One process on
    a GPU is a group of one: FSDP2 keeps its fp32 master weights (models.shard_model) as on several."""
    import torch
    if "RANK" not in os.environ and not torch.cuda.is_available():
        return 0, 1
    if "RANK" not in os.environ:   # vLLM reads these too: its engine then joins this group of one
        os.environ.update({k: v for k, v in rank_environment(0, 1, free_port()).items() if k != "OMP_NUM_THREADS"})
    missing = [k for k in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise SystemExit(f"spade.py: RANK is set but {', '.join(missing)} not: a rank is started by spade.py "
                         f"(launch.py) or torchrun; unset RANK to run one process")
    import datetime
    import torch.distributed as dist
    # 30 min, not NCCL's 10: the other ranks wait in a collective while rank 0 alone writes a 61 GB
    # checkpoint (checkpoint.py), which slow disks stretch past 10 (models.load_sharded's wait for
    # rank 0's read has a group of its own). A rank that dies is caught sooner, by the launcher.
    timeout = datetime.timedelta(minutes=30)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=timeout, **_attempt_store(timeout))
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return dist.get_rank(), dist.get_world_size()


def _attempt_store(timeout):
    """Under torchrun, whose agent lends its rendezvous store to the ranks and keeps it over restarts: a
    prefix of this job's and this attempt's own for every key the process groups write (subgroups
    included). Without it a restarted rank can meet a subgroup's key of the attempt before and connect to
    a rank that is gone (gloo's "Connection refused"; pytorch/pytorch#135712)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    import torch.distributed as dist
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    prefix = f"spade/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/attempt_{restarts()}/"
    return dict(store=dist.PrefixStore(prefix, store), rank=int(os.environ["RANK"]),
                world_size=int(os.environ["WORLD_SIZE"]))


def restarts() -> int:
    """How often torchrun (--max-restarts) has restarted this job's ranks."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def after_restart(given: dict, default_out: str) -> dict:
    """The command line's knobs, as a job torchrun restarted goes on: from its run directory's last
    checkpoint (a --resume of it) where there is one. A job that torchrun may restart needs a fixed --out,
    which the restart finds again; out/{time} would be a new directory."""
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", 0)) == 0 or given.get("resume"):
        return given
    out = given.get("out", default_out)
    if "{time}" in out:
        raise SystemExit("spade.py: under torchrun --max-restarts, give --out a directory of its own (not "
                         f"{out}): a restarted job goes on from the last checkpoint there")
    if restarts() and (Path(out) / "latest").is_file():
        return {**given, "resume": out}
    return given


def node_size(world: int) -> int:
    """The ranks on this process's node: torchrun's LOCAL_WORLD_SIZE (spade.py's own launcher starts one
    node's ranks, so all of them)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", world))


def end_rank(status: int = 0):
    """End this rank of a run once every rank is past its last collective: the process group destroyed,
    the exit handlers run (the sandbox's among them) and the output flushed, then os._exit, never the
    interpreter's own exit. destroy_process_group leaves the group's C++ threads running (gloo's workers
    and transport loop, rank 0's TCP store), because DTensor's sharding cache still holds the mesh and
    so the group; a rank whose interpreter then finalizes beside them aborts now and then ("terminate
    called without an active exception", SIGABRT: a C++ thread that touches a Python object while the
    interpreter is torn down is ended by CPython, and its unwinding through a C++ destructor calls
    std::terminate)."""
    import atexit
    import torch.distributed as dist
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    atexit._run_exitfuncs()   # os._exit skips them, and there is no public way to run them first
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def install_sigint_handler() -> threading.Event:
    """First Ctrl-C: finish this step, checkpoint, exit. Second Ctrl-C: stop at once. SIGUSR1 (the
    launcher's word for a SIGINT sent to it alone) stops as a first Ctrl-C does, however often it comes."""
    stop = threading.Event()

    def handler(signum, frame):
        if stop.is_set():   # only a SIGINT gets here then: SIGUSR1 is ignored from the first stop on
            raise KeyboardInterrupt
        stop.set()
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # one more, even while this process exits, is harmless
        print("\nCtrl-C: finishing this step and saving a checkpoint (Ctrl-C again to abort)", flush=True)
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGUSR1, handler)
    return stop


def agreed(stop: threading.Event, world: int) -> bool:
    """Whether any rank has been asked to stop: the same answer on every rank (a collective)."""
    return any(every_rank(stop.is_set(), world))


def from_rank_0(value, world: int):
    """Rank 0's `value` on every rank (a collective)."""
    return every_rank(value, world)[0]


def every_rank(value, world: int | None = None, group=None) -> list:
    """Every rank's `value`, in rank order (a collective): of the `world` ranks of `group`; by default of
    all ranks, which are this process alone where torch.distributed is not initialised."""
    import torch.distributed as dist
    world = world or (dist.get_world_size() if dist.is_initialized() else 1)
    if world == 1:
        return [value]
    values = [None] * world
    dist.all_gather_object(values, value, group=group)
    return values


def reseed(world: int, stream: int = 0):
    """Seed the global random generators from one number rank 0 draws, plus `stream`. The same stream on
    every rank after a phase in which the ranks sampled different numbers of tokens, so the next phase
    in lockstep samples alike; a stream per rank (or per tensor-parallel group, whose ranks must sample
    alike) before a phase they divide, or two ranks would draw the same noise for their plays."""
    import random
    import torch
    seed = from_rank_0(random.getrandbits(62), world) + stream
    random.seed(seed), torch.manual_seed(seed)


def share(sizes: list[float], rank: int, world: int) -> list[int]:
    """The indices of the items rank `rank` plays: largest first, each to the least loaded rank (ties:
    the lowest), so the ranks' totals of `sizes` come out even. The same on every rank.

    >>> [share([5, 1, 1, 3, 2], r, 2) for r in range(2)]
    [[0, 1], [2, 3, 4]]
    """
    load, mine = [0.0] * world, []
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        least = min(range(world), key=lambda r: (load[r], r))
        load[least] += sizes[i]
        if least == rank:
            mine.append(i)
    return sorted(mine)


def gather(mine: list, indices: list[int], total: int, world: int) -> list:
    """Every rank's items in their global order: `mine` are this rank's, at `indices` of `total`."""
    ordered = [None] * total
    for part_indices, part in every_rank((indices, mine), world):
        for i, item in zip(part_indices, part):
            ordered[i] = item
    assert all(item is not None for item in ordered), "some items were played by no rank"
    return ordered


def divide(run, sizes, work, per_rank=False):
    """`work(indices)` on this rank's share of len(sizes) items (`share`), every rank's results gathered in
    order; in one piece where the engine cannot generate on its own (`run.gen.independent()`).
    `per_rank`: work returns a list of one item, its whole share's result, and the list of the ranks' items
    comes back."""
    with run.gen.independent() as alone:
        world = run.world if alone else 1
        if world > 1:
            # A random stream of its own; vLLM's tensor-parallel groups (TensorParallelGroup) one a group.
            reseed(world, stream=run.rank // getattr(run.gen, "tp", 1))
        mine = share(sizes, run.rank, world) if world > 1 else list(range(len(sizes)))
        results = work(mine)
    if world > 1:
        reseed(world)
    if per_rank:
        return gather(results, [run.rank if world > 1 else 0], world, world)
    return gather(results, mine, len(sizes), world)


class TensorParallelGroup:
    """vLLM's engine where each `tp` consecutive ranks are one tensor-parallel engine, whose ranks must
    all make the same generate calls. Every rank still plays its own share and steps its own sandboxes:
    each call first gathers what the group's ranks ask for (`all_gather_object` in a gloo subgroup) and
    runs it all as one batch on every rank of the group, each keeping its own completions. A rank whose
    share is done keeps joining its group's calls with nothing to ask, until the whole group is done (the
    end of `independent`). tp = 1: every rank its own engine, no exchange."""

    def __init__(self, engine, tp: int, world: int):
        import torch.distributed as dist
        self.engine, self.tp, self.group, self.mine = engine, tp, None, 0
        if tp > 1:
            self.mine = dist.get_rank() % tp   # this rank's place in its group of consecutive ranks
            self.group, _ = dist.new_subgroups_by_enumeration(
                [list(range(g, g + tp)) for g in range(0, world, tp)], backend="gloo")

    def __getattr__(self, name):  # sleep, wake_up, load_weights, ...: the engine's own
        return getattr(self.engine, name)

    @contextlib.contextmanager
    def independent(self):
        yield True
        while any(call is not None for call in self._round(None)[0]):
            pass

    def generate(self, prompts, params):
        calls, results = self._round((prompts, params))
        return results[sum(call is not None for call in calls[:self.mine])]

    def _round(self, call):
        """Every group rank's call (None: nothing to ask) and the completions of those that asked."""
        calls = every_rank(call, self.tp, self.group)
        asked = [c for c in calls if c is not None]
        return calls, self.engine.generate_each(asked) if asked else []


class RankAgreement:
    """An engine whose `generate` first checks that every rank asks for the same prompts (a digest each),
    except in a phase where the ranks generate independently (`independent`)."""

    def __init__(self, engine):
        self.engine, self.divided = engine, False

    def __getattr__(self, name):  # sleep, wake_up, load_weights, ...: the engine's own
        return getattr(self.engine, name)

    @contextlib.contextmanager
    def independent(self):
        with self.engine.independent() as divided:
            self.divided = divided
            try:
                yield divided
            finally:
                self.divided = False

    def generate(self, prompts, params):
        asked = b"" if self.divided else b"".join(array.array("q", [len(p), *p]).tobytes() for p in prompts)
        if not self.divided and len(set(every_rank(hashlib.sha256(asked).digest()))) > 1:
            raise RuntimeError("the ranks asked the engine for different prompts: an environment played differently "
                               "in two processes (the clock, a deadline met on one rank only). Every rank must play "
                               "the same rollouts; resume from the last checkpoint")
        return self.engine.generate(prompts, params)

