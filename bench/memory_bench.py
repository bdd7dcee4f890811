"""The memory plan (harness/plan.py) against a run's phases simulated on this CPU, for Qwen3-4B, 8B and 30B-A3B.

    python bench/memory_bench.py                       # 3 models x 1 and 8 GPUs, about 12 minutes on 2 cores
    python bench/memory_bench.py --models random-qwen3-4b --gpus 8 --layers 2     # a quick look
    python bench/memory_bench.py --cuda --models random-qwen3-4b   # measured on this GPU, planned for it

Each model and GPU count runs a resumed run's phases in their order (`phases`): the resume (the optimizer's
state made and set back as checkpoint.load_optimizer does), `grpo.update` twice the way a GPU run calls it
(the fused loss, packed rows, activation checkpointing, the KL reference where the run has one), and a
checkpoint's gather (each parameter whole, one at a time), on the model sharded by our own FSDP2 code
(models.shard_model: fp32 master weights, bf16 compute) and stepped by grpo.make_optimizer with fp32
moments, the plan's first option (torchao's compiled 8-bit step does not run on fake tensors: a row where
the plan chose 8-bit moments compares its fp32 option, and the verdict line says what it chose),
without allocating its memory: parameters made on the meta device get fake storage (torch's
FakeTensorMode), the collectives go to a fake process group of `--gpus` ranks (sizes are per rank), and
`Simulation` records the peak of each phase (of the update: the second, when the moments exist) and what
the trainer keeps after the update, while the engine generates. The plan's other phases (vLLM's, the KL
reference's forward, the first step's compile) follow as the plan has them. It counts live storages as
torch's MemTracker does (storages resized in place included: FSDP2 frees and refills its gathered layers
so); torch's FSDPMemTracker, built on it, cannot run the update, which reads values back to the host (the
gradient norm, the stats) that fake tensors do not have (DataDependentOutputException): here they read as
0 and size nothing. The micro-batch is one sample of the plan's longest (max(micro-batch budget, --max-context)
tokens). The shapes are the real ones (`random-qwen3-*`, models.RANDOM_SHAPES); the fake tensors are CPU
ones standing for CUDA ones (compute/fused.py takes its CUDA branches for them). What it cannot simulate:
vLLM (its weights, KV cache and runtime), the allocator's fragmentation and the CUDA context.
"""
import argparse
import gc
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import weakref
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_map_only
from torch.utils.weak import WeakIdKeyDictionary

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
import grpo  # noqa: E402
from backend import models  # noqa: E402
from harness import plan  # noqa: E402

GiB = 2 ** 30
# The plan's phases that no fake tensor runs, and why (their row's second column).
UNMEASURED = {"rollout": "vLLM's share: not simulated", "KL reference's forward": "within the update's",
              "first step's compile": "vLLM's graphs: not simulated; torchao's step: no fake tensors"}
MODELS = {"random-qwen3-4b": 0.0, "random-qwen3-8b": 0.005, "random-qwen3-30b-a3b": 0.0}   # with their runs' KL


class Simulation(TorchDispatchMode):
    """Under a FakeTensorMode: the bytes of every storage alive, and their peak, from the tensors the ops
    make (the local shards of DTensors included) and storages resized in place (FSDP2 frees and refills
    its gathered layers so; caught as torch's MemTracker catches it); a value read back to the host from
    a fake tensor (which has none) reads as 0."""

    def __init__(self):
        super().__init__()
        self.sizes, self.now, self.peak = WeakIdKeyDictionary(), 0, 0

    def track(self, tensor):
        if is_traceable_wrapper_subclass(tensor):   # a DTensor: its local shard holds the memory
            for name in tensor.__tensor_flatten__()[0]:
                self.track(getattr(tensor, name))
        elif isinstance(tensor, torch.Tensor) and tensor.untyped_storage() not in self.sizes:
            storage = tensor.untyped_storage()
            self.sizes[storage] = cell = [0]
            weakref.finalize(storage, self.resized, cell, 0)
            self.resized(cell, storage.nbytes())

    def resized(self, cell, nbytes):
        self.now += nbytes - cell[0]
        cell[0] = nbytes
        self.peak = max(self.peak, self.now)

    def __enter__(self):
        resize = self.resize = torch.UntypedStorage.resize_

        def resize_(storage, nbytes):
            resize(storage, nbytes)
            if storage in self.sizes:
                self.resized(self.sizes[storage], storage.nbytes())
        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self.resize
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import DataDependentOutputException
        try:
            out = func(*args, **(kwargs or {}))
        except DataDependentOutputException:
            return 0
        tree_map_only(torch.Tensor, self.track, out)
        return out


def fake_update(name, gpus, tokens, kl_coef, moments):
    """{phase: bytes per rank} of a run's phases on the trainer's side (`phases`), simulated."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoModelForCausalLM
    dist.init_process_group("fake", rank=0, world_size=gpus, store=FakeStore())
    try:
        config = models.model_config(name)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            reference = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16) if kl_coef else None
        models.shard_model(model, torch.bfloat16)
        if reference is not None:
            models.shard_model(reference).requires_grad_(False)
        with FakeTensorMode(allow_non_fake_inputs=True), Simulation() as simulation:
            model.to_empty(device="cpu")
            if reference is not None:
                reference.to_empty(device="cpu")
            optimizer = grpo.make_optimizer(model, moments=moments)
            meter = (lambda: setattr(simulation, "peak", simulation.now), lambda: simulation.peak,
                     lambda: simulation.now)
            return phases(model, reference, optimizer, config, gpus, tokens, kl_coef, meter, gather_each)
    finally:
        dist.destroy_process_group()


def cuda_update(name, tokens, kl_coef, moments):
    """The same on this process's GPU, for real, in a process group of one: torch.cuda.max_memory_allocated
    of each phase, torch.cuda.memory_allocated after the update; the checkpoint's gather is models.full_state
    itself. bench/gpu_check.sh runs it."""
    from backend.launch import free_port
    dist.init_process_group("nccl", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{free_port()}")
    try:
        model, _ = models.random_model(name, dtype=torch.float32, device="cuda")
        models.shard_model(model, torch.bfloat16)
        reference = models.shard_model(models.random_model(name, dtype=torch.bfloat16, device="cuda")[0]) \
            if kl_coef else None
        if reference is not None:
            reference.requires_grad_(False)
        optimizer = grpo.make_optimizer(model, moments=moments)
        meter = (torch.cuda.reset_peak_memory_stats, torch.cuda.max_memory_allocated, torch.cuda.memory_allocated)
        return phases(model, reference, optimizer, model.config, 1, tokens, kl_coef, meter, models.full_state)
    finally:
        dist.destroy_process_group()


def phases(model, reference, optimizer, config, gpus, tokens, kl_coef, meter, gather):
    """A resumed run's phases in its order, each one's peak: the resume makes the optimizer's state as
    checkpoint.load_optimizer does (torch.distributed.checkpoint's read into it aside: in place, from the
    host); two updates (`update_twice`); what the trainer keeps after them (the rollout's share); and a
    checkpoint's `gather` and optimizer state dict. `meter`: (start a window, its peak, bytes now)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
    start, peak, now = meter
    out = {}
    start()
    set_optimizer_state_dict(model, optimizer, get_optimizer_state_dict(model, optimizer))
    out["resume"] = peak()
    update_twice(model, reference, optimizer, config, gpus, tokens, kl_coef, between=start)
    out["update"] = peak()
    gc.collect()
    out["rollout (trainer)"] = now()
    start()
    state = gather(model), get_optimizer_state_dict(model, optimizer)
    out["checkpoint"] = peak()
    del state
    return out


def gather_each(model):
    """The checkpoint's gather as get_model_state_dict(full_state_dict=True, cpu_offload=True) does it on a
    GPU: each parameter whole (DTensor.full_tensor), copied to the host and dropped before the next. Not
    the function itself: here a fake CPU tensor stands for a GPU one, so its host copies would count."""
    for tensor in model.state_dict().values():
        whole = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        del whole


def update_twice(model, reference, optimizer, config, gpus, tokens, kl_coef, between):
    """grpo.update as a GPU run calls it: once on one micro-batch a rank (its step makes the moments),
    `between()`, then on two of the longest a rank (in the second, the first's gradients are kept)."""
    samples = [grpo.Sample([i % config.vocab_size for i in range(tokens)], [0] * (tokens // 2) + [1] * (tokens - tokens // 2),
                           [-1.0] * tokens, 1.0)] * (2 * gpus)
    kwargs = dict(route="torch_varlen", fused_loss=True, activation_checkpointing=True, kl_coef=kl_coef,
                  ref_model=reference, micro_token_budget=tokens)
    grpo.update(model, optimizer, samples[:gpus], **kwargs)
    between()
    grpo.update(model, optimizer, samples, **kwargs)


def rows(names, gpu_counts, gpu_bytes, layers=None, max_context=32768, cuda=False):
    """[(model, GPUs, phase, plan bytes, simulated bytes)], printed as measured; `cuda`: measured on this
    GPU instead (one GPU: the rows of 1)."""
    out, what = [], "measured on the GPU" if cuda else "simulated"
    print(f"| model | GPUs | phase | plan GiB | {what} GiB | plan / {what.split()[0]} |")
    print("|---|---|---|---|---|---|")
    for base in names:
        name = base + (f":{layers}" if layers and base.startswith("random-") else "")
        config = models.model_config(name)
        for gpus in gpu_counts:
            knobs = plan.Knobs(kl_coef=MODELS.get(base, 0.0), max_context=max_context,
                               micro_token_budget=min(plan.Knobs.micro_token_budget, max_context))
            chosen = plan.plan(config, gpus, gpu_bytes, knobs)
            # What the simulation can run: fp32 moments, the KL reference on the GPU (torchao's compiled 8-bit
            # step does not run on fake tensors, and a fake tensor in host memory looks like one on the GPU).
            compared = plan.option(config, gpus, gpu_bytes, knobs, "fp32", False)
            start = time.perf_counter()
            measured = (cuda_update(name, compared.tokens, knobs.kl_coef, "fp32") if cuda else
                        fake_update(name, gpus, compared.tokens, knobs.kl_coef, "fp32"))
            sim_name = name.removeprefix("random-")
            planned = {**compared.phases, "rollout (trainer)": compared.trainer_kept}
            for phase in ("update", "rollout (trainer)", "resume", "checkpoint"):
                out.append((name, gpus, phase, planned[phase], measured[phase]))
                print(f"| {sim_name} | {gpus} | {phase} | {planned[phase] / GiB:.2f} | {measured[phase] / GiB:.2f} | "
                      f"{planned[phase] / measured[phase]:.3f} |", flush=True)
            # The run's own plan of the phases no fake tensor runs (none where it is refused: no vLLM sized)
            for phase, value in ((p, v) for p, v in chosen.phases.items() if p not in measured and v):
                print(f"| {sim_name} | {gpus} | {phase} | {value / GiB:.2f} | {UNMEASURED[phase]} | |")
            verdict = f"refused: {chosen.problem}" if chosen.problem else f"plan: {chosen.summary()}"
            print(f"<!-- {sim_name} x{gpus} on {gpu_bytes / GiB:.1f} GiB GPUs, {verdict}; {what} in "
                  f"{time.perf_counter() - start:.0f} s -->", flush=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--gpus", default="1,8")
    parser.add_argument("--gpu-gib", type=float, default=79.2, help="memory of one GPU (an H100's 80 GB; --cuda: this GPU's)")
    parser.add_argument("--layers", type=int, default=None, help="cut every random- model to this many layers")
    parser.add_argument("--max-context", type=int, default=32768, help="the run's --max-context")
    parser.add_argument("--cuda", action="store_true", help="measure the update on this GPU (one), not simulated")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    gpus = [1] if args.cuda else [int(g) for g in args.gpus.split(",")]
    card = torch.cuda.get_device_properties(0).total_memory if args.cuda else int(args.gpu_gib * GiB)
    return rows(args.models.split(","), gpus, card, args.layers, args.max_context, args.cuda)


if __name__ == "__main__":
    main()
