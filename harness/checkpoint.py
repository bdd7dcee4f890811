"""Checkpoints: what spade.py writes every --save-every steps and reads back on --resume.

`ckpt-NNNNN/` holds the model and tokenizer in Hugging Face format (`model/`), the optimizer's state
(`optimizer/`: fp32 moments by parameter name with torch.distributed.checkpoint, so a resume reshards
them to any number of processes or nodes; torchao's 8-bit moments, which it cannot reshard, as each rank
holds them), the loop state and the RNGs (`state.pt`) and the environment memory.
It is written to a hidden directory and renamed into place, and the `latest` pointer (with the config
and the checkpoint VERSION) is replaced atomically, so a kill never leaves half of one; the last two
are kept. The KL reference is never saved: `kl_reference` rebuilds it from the initial model. One
process holds a run directory (`claim`); a pointer or checkpoint that cannot be read, or a disk too
full to write one, is one sentence that names what is kept.

A run directory may have been written by someone else (a shared file system, a downloaded run): a resume
reads it as data. The pointer names a ckpt-<step> folder of the run's own, and the run directory holds no
link inside it (what a resume writes there never lands elsewhere); `state.pt` and 8-bit moments are read with
torch.load's weights_only, which builds tensors, plain values and, by name, the loop state's classes
(`_state_classes`); torch.distributed.checkpoint's `.metadata` is unpickled with its own classes alone
(`_data_reader`). Anything else in them is one sentence, never code run.
"""
import contextlib
import dataclasses
import fcntl
import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path

from sandbox.contract import printable, read_json

_LOCKS = []   # the claimed run directories' lock files, open for the life of the process
VERSION = 3   # of what a checkpoint holds; a checkpoint of another version is refused, never converted


def claim(run_dir, resuming, restarted=False):
    """Make (or reopen) the run directory and hold its lock while this process lives: two processes
    never share a run, and a fresh run never writes over the checkpoints and metrics of another, nor into
    a directory holding anything else (whose mode it would set). `restarted`: torchrun restarted this job
    before its first checkpoint, so what is there is its own."""
    if running(run_dir):
        raise SystemExit(f"spade.py: another process is running in {run_dir}")
    try:   # what is there first: a directory that is not the run's keeps its mode
        held = {p.name for p in run_dir.iterdir()} - {".lock"} if run_dir.is_dir() and not resuming else set()
        if "latest" in held:
            raise SystemExit(f"spade.py: {run_dir} already holds a run; continue it with --resume {run_dir}, "
                             f"or give another --out")
        if held and not restarted:
            why = ("holds a run that saved no checkpoint; remove it or give another --out" if "metrics.jsonl" in held
                   else "holds other files: a run needs a new or empty directory (--out)")
            raise SystemExit(f"spade.py: {run_dir} {why}")
        run_dir.mkdir(parents=True, exist_ok=True)
        run_dir.chmod(0o700)   # the run's state is the trainer's: a sandbox (a uid of its own) reads none of it
        lock = open(run_dir / ".lock", "a")
    except OSError as e:
        raise SystemExit(f"spade.py: cannot use {run_dir} as the run's directory: {e.strerror or e}")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise SystemExit(f"spade.py: another process is running in {run_dir}")
    _LOCKS.append(lock)


@contextlib.contextmanager
def claimed(run_dir, resuming, rank, world=1, restarted=False):
    """`claim` on rank 0, for a block that sets the run up: a directory it made is removed again where the
    block fails before anything but the lock was written (a model that does not load, say). Every rank
    must see it (`shared`)."""
    made = rank == 0 and not run_dir.exists()
    if rank == 0:
        claim(run_dir, resuming, restarted)
    try:
        shared(run_dir, rank, world)
        yield
    except BaseException:
        if made and [p.name for p in run_dir.iterdir()] == [".lock"]:
            (run_dir / ".lock").unlink()
            run_dir.rmdir()
        raise


def shared(run_dir, rank, world):
    """Check that every rank sees the run directory rank 0 writes (on several nodes: a shared file system):
    rank 0 writes a token there and every rank reads it back. Where one cannot, every rank stops with the
    same sentence, before the model loads: a node that wrote checkpoints of its own would lose them."""
    if world == 1:
        return
    import secrets
    import socket
    import torch.distributed as dist
    from backend.launch import every_rank, from_rank_0
    token, path = from_rank_0(secrets.token_hex(16), world), run_dir / ".shared"
    if rank == 0:
        path.write_text(token)
    dist.barrier()
    try:
        seen = path.read_text() == token
    except OSError:
        seen = False
    views = every_rank((seen, socket.gethostname()), world)
    if rank == 0:
        path.unlink()
    blind = [f"{r} ({host})" for r, (ok, host) in enumerate(views) if not ok]
    if blind:
        raise SystemExit(f"spade.py: rank{'s' * (len(blind) > 1)} {', '.join(blind)} cannot read the run directory "
                         f"{run_dir} that rank 0 ({views[0][1]}) writes: on several nodes it must be on a file "
                         f"system they share (give --out such a path)")


def running(run_dir):
    """Whether a process holds the run directory (`claim`)."""
    try:
        with open(Path(run_dir) / ".lock") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:   # held: BlockingIOError; no lock file: no run has held it
        return isinstance(e, BlockingIOError)
    return False


def save_checkpoint(run_dir, cfg, model, tokenizer, optimizer, memory, state, rank):
    """Write ckpt-<step> and point `latest` at it. Every rank calls it; rank 0 writes."""
    import torch
    from safetensors import SafetensorError
    from backend import models
    full_model = models.full_state(model)
    name = f"ckpt-{state['step']:05d}"
    tmp = run_dir / f".{name}.tmp"
    try:   # a full disk: OSError, torch.save's RuntimeError or safetensors'; the last good checkpoint stays
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        barrier(run_dir, name)
        save_optimizer(optimizer, model, tmp, rank)
        barrier(run_dir, name)
        if rank != 0:
            return
        model.save_pretrained(tmp / "model", state_dict=full_model)
        tokenizer.save_pretrained(tmp / "model")
        torch.save({"state": state, "python_rng": random.getstate(), "torch_rng": torch.get_rng_state(),
                    # the in-process engine samples on the GPU with its generator, not the CPU's
                    "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}, tmp / "state.pt")
        (tmp / "env_memory.json").write_text(json.dumps(memory.records if memory else []))
        shutil.rmtree(run_dir / name, ignore_errors=True)
        os.replace(tmp, run_dir / name)
        pointer = run_dir / ".latest.tmp"
        pointer.write_text(json.dumps({"version": VERSION, "checkpoint": name, "step": state["step"],
                                       "config": dataclasses.asdict(cfg)}))
        os.replace(pointer, run_dir / "latest")
    except (OSError, RuntimeError, SafetensorError) as e:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"spade.py: cannot write {run_dir / name} ({e}); {_kept(run_dir)}") from None
    older = [p for p in _checkpoints(run_dir) if int(p.name[5:]) < state["step"]]
    for old in older[:-1]:   # keep this one and the one before it
        shutil.rmtree(old, ignore_errors=True)


def _checkpoints(run_dir):
    """The ckpt-<step> folders of `run_dir` by step (by name, ckpt-100000 < ckpt-99999)."""
    return sorted((p for p in run_dir.glob("ckpt-*") if p.name[5:].isdecimal()), key=lambda p: int(p.name[5:]))


def _kept(run_dir):
    kept = [p.name for p in _checkpoints(run_dir)]
    return f"the checkpoints kept in {run_dir}: {', '.join(kept)}" if kept else f"{run_dir} keeps no checkpoint"


def read_pointer(run_dir):
    """A run directory's `latest` pointer, {checkpoint, step, config}, once it is one and the checkpoint
    it names holds its files; otherwise one sentence."""
    run_dir = Path(run_dir)
    latest = run_dir / "latest"
    if not latest.is_file():
        raise SystemExit(f"spade.py: another process is running in {run_dir}, which has no checkpoint yet"
                         if running(run_dir) else f"spade.py: no checkpoint to resume in {run_dir} (--resume takes "
                         f"a run's directory, the one that holds `latest`)")
    try:   # the pointer is a few kB: a link or a file of megabytes is not one
        small = not latest.is_symlink() and latest.stat().st_size < 1 << 20
        pointer = read_json(latest.read_bytes()) if small else None
    except (OSError, ValueError):   # not JSON, not UTF-8, nested too deep
        pointer = None
    if not (type(pointer) is dict and isinstance(pointer.get("checkpoint"), str) and type(pointer.get("step")) is int
            and isinstance(pointer.get("config"), dict)):
        raise SystemExit(f"spade.py: {latest} is not a checkpoint pointer; {_kept(run_dir)}")
    if pointer.get("version") != VERSION:
        raise SystemExit(f"spade.py: {run_dir} was written by another version of spade.py (checkpoint version "
                         f"{pointer.get('version', 1)}, this one reads {VERSION}); start a new run")
    folder = run_dir / pointer["checkpoint"]
    # A ckpt-<step> folder of the run's own, holding no link: a pointer that names another place (an
    # absolute path, `..`, a link) is not followed.
    if (not re.fullmatch(r"ckpt-[0-9]+", pointer["checkpoint"]) or folder.is_symlink() or not folder.is_dir()
            or any(p.is_symlink() for p in folder.rglob("*"))):
        raise SystemExit(f"spade.py: {latest} names {printable(pointer['checkpoint'][:100])!r}, which is not a "
                         f"checkpoint of {run_dir} (a ckpt-<step> folder of its own, holding no link); {_kept(run_dir)}")
    link = next((p for p in run_dir.rglob("*") if p.is_symlink()), None)   # what a resume writes lands on its target
    if link:
        raise SystemExit(f"spade.py: {run_dir} holds a link ({printable(link.name)!r}); a resume writes through none")
    missing = [name for name in ("model", "state.pt", "env_memory.json", "optimizer")
               if not (folder / name).exists()]
    if missing:
        raise SystemExit(f"spade.py: {latest} names {pointer['checkpoint']}, which lacks {', '.join(missing)}; "
                         f"{_kept(run_dir)}")
    return pointer


def damaged(checkpoint, error):
    """The one sentence for a checkpoint file that cannot be read (truncated, or holding objects that are not
    data: weights_only's refusal, an UnpicklingError)."""
    if isinstance(error, pickle.UnpicklingError):
        error = ValueError("it holds objects other than tensors and plain values, which a resume never unpickles")
    return SystemExit(f"spade.py: {checkpoint} cannot be read ({type(error).__name__}: "
                      f"{printable(str(error)[:300])}); {_kept(checkpoint.parent)}")


def _state_classes():
    """The classes the loop state holds (spade.py's `state`), all the objects `state.pt` may build besides
    tensors and plain values: they are dataclasses of plain values and random.Random, its generator state."""
    import agent
    import designer
    import envs
    import regret
    from baselines import rlve
    return [random.Random, envs.Environment, regret.Epoch, regret.LearningPotentialTracker, designer.DesignerSample,
            agent.Episode, rlve.Curriculum]


def restore(checkpoint, model, optimizer, memory, rank):
    """Optimizer, RNGs and environment memory as they were when the checkpoint was
    saved; returns the loop state. Every rank calls it and reads its own optimizer shards."""
    import torch
    try:
        load_optimizer(optimizer, model, checkpoint, rank)
        with torch.serialization.safe_globals(_state_classes()):
            saved = torch.load(checkpoint / "state.pt", weights_only=True)
        records = None if memory is None else memory.checked(read_json((checkpoint / "env_memory.json").read_bytes()))
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:
        raise damaged(checkpoint, e) from None
    random.setstate(saved["python_rng"])
    torch.set_rng_state(saved["torch_rng"])
    if saved.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(saved["cuda_rng"])
    if memory is not None:
        memory.records = records
        if rank == 0:
            memory.save()
    return {"lengths": {}, **saved["state"]}


def barrier(run_dir, name):
    """Every rank at this point of writing `name`; a rank that died on the way is one sentence, not a
    failed write (its collective fails with a RuntimeError, as a full disk does)."""
    import torch.distributed as dist
    if dist.is_initialized() and dist.get_world_size() > 1:
        try:
            dist.barrier()
        except RuntimeError as e:
            raise SystemExit(f"spade.py: another rank stopped while {name} was being written "
                             f"({str(e).splitlines()[0][:200]}); {_kept(run_dir)}") from None


def save_optimizer(optimizer, model, directory, rank):
    """The optimizer's state in `directory`/optimizer, written by every rank. fp32 moments: with
    torch.distributed.checkpoint, by parameter name, each rank its own shards, so that `load_optimizer`
    reshards them to another number of processes. torchao's 8-bit moments (quantised tensor subclasses
    that it cannot reshard): each rank's state as it holds it, rank<r>.pt."""
    import torch
    folder = directory / "optimizer"
    if _eight_bit(optimizer):
        folder.mkdir(exist_ok=True)
        torch.save(optimizer.state_dict(), folder / f"rank{rank}.pt")
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    _dcp(dcp.save, get_optimizer_state_dict(model, optimizer), checkpoint_id=folder)


def load_optimizer(optimizer, model, directory, rank):
    """Read back what `save_optimizer` wrote: fp32 moments onto this run's processes, however many; 8-bit
    ones only onto as many processes as saved them. Moments of the other kind (the memory plan chose
    otherwise on these GPUs) are one sentence."""
    import torch
    import torch.distributed as dist
    folder, world = directory / "optimizer", dist.get_world_size() if dist.is_initialized() else 1
    per_rank = len(list(folder.glob("rank*.pt")))
    saved, wanted = ("8-bit" if per_rank else "fp32"), ("8-bit" if _eight_bit(optimizer) else "fp32")
    if saved != wanted:
        raise SystemExit(f"spade.py: {directory} holds {saved} optimizer moments and this run's memory plan takes "
                         f"{wanted} ones (harness/plan.py); resume it on GPUs where the plan takes {saved} moments")
    if per_rank:
        if per_rank != world:
            raise SystemExit(f"spade.py: {directory} holds torchao's 8-bit optimizer moments of {per_rank} "
                             f"process{'es' * (per_rank != 1)}, which cannot be resharded; resume it with {per_rank}, "
                             f"not {world}")
        optimizer.load_state_dict(torch.load(folder / f"rank{rank}.pt", weights_only=True))   # torchao allows its class
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
    state = get_optimizer_state_dict(model, optimizer)   # the layout this run holds, moments made if none
    reader = _data_reader(folder)
    reader.read_metadata()   # first here: dcp.load would turn its refusal into an AssertionError of its own
    _dcp(dcp.load, state, checkpoint_id=folder, storage_reader=reader)
    set_optimizer_state_dict(model, optimizer, state)


def _dcp(call, state, checkpoint_id, **reader):
    """torch.distributed.checkpoint's save or load, in one process without a process group where there is
    none, its failure raised as the error a rank met (its CheckpointException is a BaseException holding
    every rank's, traceback and all): a full disk or a truncated file is then one sentence as elsewhere."""
    import warnings
    import torch.distributed as dist
    from torch.distributed.checkpoint.api import CheckpointException
    try:
        with warnings.catch_warnings():   # that one process means one process, at every checkpoint
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
            return call(state, checkpoint_id=checkpoint_id, no_dist=not dist.is_initialized(), **reader)
    except CheckpointException as e:
        error = next(iter(e.failures.values()))[0]
        raise error if isinstance(error, Exception) else RuntimeError(repr(error)) from None


# What DCP's `.metadata` holds: its own metadata classes, torch's sizes, dtypes, layouts and memory formats,
# and the path the checkpoint was written at. The unpickler finds these by name and nothing else.
_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {"Metadata", "MetadataIndex", "TensorStorageMetadata", "StorageMeta",
                                              "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
                                              "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo", "_StoragePrefix"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath"},
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        import torch
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format)):
            return getattr(torch, name)
        if name in _METADATA_CLASSES.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not checkpoint metadata")


def _data_reader(folder):
    """torch.distributed.checkpoint's file reader, its `.metadata` read by `_MetadataUnpickler` and naming
    only files of `folder` (which reads them with weights_only)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class DataReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            with open(self._get_metadata_path(kwargs.get("rank")), "rb") as file:
                metadata = _MetadataUnpickler(file).load()
            data = getattr(metadata, "storage_data", None)
            files = [getattr(info, "relative_path", None) for info in data.values()] if type(data) is dict else [None]
            if type(metadata) is not Metadata or not all(type(f) is str and re.fullmatch(r"[\w.-]+", f)
                                                         and f.strip(".") for f in files):
                raise pickle.UnpicklingError("its metadata is not DCP's, or names a file outside its folder")
            metadata.storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()   # as DCP's reader
            metadata.storage_meta.load_id = self.load_id
            return metadata
    return DataReader(folder)


def _eight_bit(optimizer):
    return type(optimizer).__module__.startswith("torchao")


def kl_reference(cfg, model, resumed, sharded=False, offload=False):
    """The frozen initial model of the KL term (METHOD 7.2), or None when kl_coef is 0. A resumed
    policy holds trained weights, so the reference is then loaded from cfg.model (the saved config
    keeps the initial name); so it is when sharded (models.load_sharded), where FSDP2 modules cannot be
    copied: in the policy's compute dtype (bf16 on a GPU: the reference needs no master weights),
    in host memory where the memory plan puts it (`offload`)."""
    import grpo
    from backend import models
    if not cfg.kl_coef:
        return None
    if sharded:
        return models.load_sharded(cfg.model, dtype=model.compute_dtype, offload=offload)[0].eval().requires_grad_(False)
    return models.load_model(cfg.model)[0].eval().requires_grad_(False) if resumed else grpo.frozen_copy(model)
