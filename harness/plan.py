"""The memory plan of a GPU run: each phase's bytes per GPU from the model's config, the GPUs and the knobs.

    chosen = plan(models.model_config("Qwen3-8B"), gpus=8, gpu_bytes=torch.cuda.mem_get_info()[1], knobs=Knobs())
    chosen.problem or chosen.summary()     # one sentence why it does not fit, or what it chose
    python spade.py plan --model Qwen3-30B-A3B --gpus 8 --gpu-gib 80   # the same before renting the GPUs

Arithmetic on the config, milliseconds, before anything loads (harness/setup.py). vLLM is awake in one phase,
the rollout, where the trainer keeps its fp32 master weights and optimizer moments (and the KL reference)
while vLLM holds its bf16 weights (a 1/tp share), its runtime and its KV cache. It sleeps (level 2: its
weights and KV cache freed) from each update to the next step's weight push, and from its start to the
first push, so that the other phases have its memory: the update (the gradients, the layers FSDP2
gathers, the activations of the longest micro-batch and the output layer's buffers; the KL reference's
forward within it), a checkpoint (each parameter gathered whole) and a resume (the optimizer's state
made by zero gradients and a step). `phase_bytes` gives each. The plan picks, in this order of
preference, fp32 moments (as officially) before 8-bit ones, the KL reference on the GPU before in host
memory, and the smallest tensor-parallel size whose weights take at most half of vLLM's share, among the
divisors of a node's GPUs; vLLM's share is what the rollout leaves. On several nodes a node holds one
sharded copy (hybrid sharding). Where nothing fits, `problem` names the smallest change that does.
bench/memory_bench.py checks the update, resume and checkpoint against the real ones, simulated.
Not modelled: vLLM's own runtime and the CUDA context (estimates: VLLM_RUNTIME, RESERVED), and the HF
engine's KV cache (what is left).
"""
import math
from dataclasses import asdict, dataclass, field, fields, replace

GiB = 2 ** 30
# Per GPU, not simulated here: the CUDA context, NCCL's buffers, vLLM asleep (its CUDA graphs) and the
# allocator's fragmentation (RESERVED); vLLM awake beside its weights and KV cache: activations of a
# 16k-token batch, sampler and graphs (VLLM_RUNTIME). Estimates from vLLM's start-up logs, not measured.
RESERVED = 4 * GiB
VLLM_RUNTIME = 3 * GiB
CHUNK_TOKENS = 512   # compute/fused.py's Sweep.chunk_tokens: the output layer's logits, a chunk at a time


@dataclass
class Knobs:
    """What of a run's config sizes its memory (`fitting` fills it from spade.Config, by the same names)."""
    max_context: int = 32768
    micro_token_budget: int = 16384
    kl_coef: float = 0.0
    designer_max_tokens: int = 16384
    hint_max_tokens: int = 4096
    corpus_max_words: int = 6000
    audit: bool = False
    num_envs: int = 24
    plays_per_env: int = 8
    hint_plays: int = 16
    engine: str = "vllm"   # "hf": the trainer's own model generates (no vLLM share)
    tp: int = 0            # 0: the plan's choice


@dataclass
class Plan:
    gpus: int
    gpu_bytes: int
    moments: str                      # "fp32" or "8bit"
    kl: bool                          # the run has a KL reference
    kl_on_cpu: bool
    tp: int
    tokens: int                       # the longest micro-batch
    max_model_len: int
    max_num_seqs: int
    update: dict = field(default_factory=dict)    # component -> bytes per GPU
    rollout: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)    # phase -> its peak bytes per GPU (`phase_bytes`)
    trainer_kept: int = 0             # of the rollout: what the trainer keeps
    vllm_share: float = 0.0           # vLLM's gpu_memory_utilization
    kv_tokens: int = 0                # tokens one engine's KV cache holds
    problem: str | None = None

    def summary(self) -> str:
        kl = ("in host memory" if self.kl_on_cpu else "on the GPU") if self.kl else "none"
        line = (f"update {sum(self.update.values()) / GiB:.1f} GiB, rollout {sum(self.rollout.values()) / GiB:.1f} "
                f"GiB of {self.gpu_bytes / GiB:.1f} per GPU; {self.moments} moments, KL reference {kl}")
        if self.kv_tokens:
            line += (f"; vLLM tp {self.tp}, {self.vllm_share:.2f} of each GPU, KV cache {self.kv_tokens:,} tokens "
                     f"({self.kv_tokens / self.max_model_len:.1f} contexts of {self.max_model_len:,})")
        return line


def shapes(config):
    """(parameters, parameters of one decoder layer, of the root: embeddings, lm_head, final norm)."""
    H, D = config.hidden_size, getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    q, kv = config.num_attention_heads * D, config.num_key_value_heads * D
    attention = H * (2 * q + 2 * kv) + 2 * D + 2 * H            # q, k, v, o; q/k norms; two layer norms
    if getattr(config, "num_experts", None):
        mlp = H * config.num_experts + config.num_experts * 3 * H * config.moe_intermediate_size
    else:
        mlp = 3 * H * config.intermediate_size
    root = config.vocab_size * H * (1 if config.tie_word_embeddings else 2) + H
    return root + config.num_hidden_layers * (attention + mlp), attention + mlp, root


def activations(config, tokens):
    """Bytes of one micro-batch's activations at its peak, with activation checkpointing: the checkpointed
    input of every layer, one layer's recomputed forward and its backward, and the output layer's sweep."""
    H, L, V = config.hidden_size, config.num_hidden_layers, config.vocab_size
    D = getattr(config, "head_dim", None) or H // config.num_attention_heads
    q, kv = config.num_attention_heads * D, config.num_key_value_heads * D
    if getattr(config, "num_experts", None):   # routed copies of the tokens, k per token
        inner = config.num_experts_per_tok * (H + 3 * config.moe_intermediate_size)
    else:
        inner = 3 * config.intermediate_size
    checkpoints = 2 * tokens * H * (L + 2)                    # bf16 layer inputs, the embedding and final norm
    layer = 2 * tokens * (6 * H + 2 * q + 2 * kv + 2 * inner)  # one layer's recomputed tensors and their grads
    output = 4 * V * H + 2 * V * H + 4 * CHUNK_TOKENS * V + 8 * tokens * H   # grad_weight fp32 (+ bf16), logits
    return checkpoints + layer + output


def update_bytes(config, gpus, tokens, moments, kl_on_gpu):
    """The update's peak per GPU, by component."""
    P, layer, root = shapes(config)
    return {"master weights (fp32)": 4 * P / gpus, "gradients (fp32)": 4 * P / gpus,
            f"moments ({moments})": (8 if moments == "fp32" else 2) * P / gpus,
            "KL reference (bf16)": 2 * P / gpus if kl_on_gpu else 0,
            # FSDP2 holds the root whole through forward and backward, and a layer or two at a time (bf16),
            # with a layer's gradients in bf16 and in fp32 for the reduce-scatter.
            "gathered by FSDP2": 2 * root + 2 * 2 * layer + (2 + 4) * layer,
            "activations": activations(config, tokens)}


def largest_parameter(config):
    """The elements of the model's largest tensor: the embeddings (or lm_head), or an MoE layer's experts
    packed as transformers holds them ([E, 2I, H] gate_up_proj)."""
    H = config.hidden_size
    if getattr(config, "num_experts", None):
        return max(config.vocab_size * H, config.num_experts * 2 * config.moe_intermediate_size * H)
    return max(config.vocab_size * H, config.intermediate_size * H)


def phase_bytes(config, gpus, tokens, kept, update, rollout, kl):
    """Each phase that holds GPU memory, its peak bytes per GPU (RESERVED aside). vLLM is awake in the
    rollout alone: it sleeps from the update to the next step's weight push (spade.train), and from its
    start to the first push (harness/setup.py), so the update, a checkpoint and a resume have its memory.
    The KL reference's forward runs in the update, on a micro-batch after the first (the gradients of the
    first exist); the first step's compiles (vLLM's graphs at its start, inside VLLM_RUNTIME; torchao's
    8-bit step, Inductor without autotuning) take nothing beyond their phase's."""
    P, layer, root = shapes(config)
    gradients, whole = 4 * P / gpus, 4 * largest_parameter(config)
    phases = {"rollout": sum(rollout.values()), "update": sum(update.values()),
              # get_optimizer_state_dict makes the state: zero gradients and a step (one parameter's temporaries)
              "resume": kept + gradients + whole / gpus,
              # get_model_state_dict(full_state_dict, cpu_offload): each fp32 parameter whole, one at a time,
              # twice (the all-gather's output and the tensor it makes of it)
              "checkpoint": kept + 2 * whole}
    if kl:   # the reference's root and two layers gathered (bf16), one layer's no-grad forward, the sweep
        D = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        forward = (2 * tokens * (4 * config.hidden_size + 2 * D * config.num_attention_heads)
                   + 4 * CHUNK_TOKENS * config.vocab_size)
        phases["KL reference's forward"] = kept + gradients + 2 * root + 2 * 2 * layer + forward
    phases["first step's compile"] = max(phases["rollout"], phases["update"])
    return phases


def kv_bytes_per_token(config, tp):
    """One token's keys and values (bf16) on one GPU of a tp engine; key/value heads split over tp, at least one."""
    D = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * 2 * config.num_hidden_layers * D * max(1, config.num_key_value_heads // tp)


def context_length(knobs):
    """vLLM's max_model_len: the longest sequence a generate call of the run sees, in multiples of 256. A
    designer prompt is bounded by its document (about 2 tokens a word, and 4,096 for the rest)."""
    designer = 2 * knobs.corpus_max_words + 4096 + knobs.designer_max_tokens
    reads_code = knobs.designer_max_tokens + 4096 + max(knobs.hint_max_tokens,
                                                        min(16384, knobs.designer_max_tokens) if knobs.audit else 0)
    return 256 * math.ceil(max(knobs.max_context, designer, reads_code) / 256)


def plan(config, gpus: int, gpu_bytes: int, knobs: Knobs, node_gpus: int | None = None) -> Plan:
    """The first option that fits (fp32 before 8-bit moments, the KL reference on the GPU before in host
    memory), or the preferred one with `problem` set, naming the smallest change that fits. `node_gpus`:
    the GPUs of one node (all of them by default); a tensor-parallel engine never spans two nodes."""
    tried = [option(config, gpus, gpu_bytes, knobs, moments, cpu, node_gpus) for moments in ("fp32", "8bit")
             for cpu in (False, True) if knobs.kl_coef or not cpu]
    chosen = next((p for p in tried if p.problem is None), tried[0])
    if chosen.problem:
        chosen.problem += "; " + _what_fits(config, gpus, gpu_bytes, knobs, node_gpus)
    return chosen


def tp_choices(node_gpus, tp=0):
    """The tensor-parallel sizes a run may use: the divisors of a node's GPUs, so that each engine's
    consecutive ranks are on one node (torchrun numbers a node's ranks consecutively); `tp`: just it."""
    return [tp] if tp else [size for size in range(1, node_gpus + 1) if node_gpus % size == 0]


def option(config, gpus, gpu_bytes, knobs, moments, kl_on_cpu, node_gpus=None):
    tokens = max(knobs.micro_token_budget, knobs.max_context)
    kl_on_gpu = bool(knobs.kl_coef) and not kl_on_cpu
    usable = gpu_bytes - RESERVED
    shards = min(gpus, node_gpus or gpus)   # hybrid sharding: a node holds one copy (models.shard_model)
    P, _, _ = shapes(config)
    update = update_bytes(config, shards, tokens, moments, kl_on_gpu)
    # What the trainer keeps on a GPU between updates: master weights, moments, the KL reference.
    kept = int((4 + (8 if moments == "fp32" else 2) + (2 if kl_on_gpu else 0)) * P / shards)
    chosen = Plan(gpus, gpu_bytes, moments, bool(knobs.kl_coef), kl_on_cpu and bool(knobs.kl_coef), 1, tokens,
                  context_length(knobs), 0, update, trainer_kept=kept)
    phases = phase_bytes(config, shards, tokens, kept, update, {}, chosen.kl)
    asleep = {name: phases[name] for name in ("update", "resume", "checkpoint", "KL reference's forward")
              if name in phases}
    worst = max(asleep, key=asleep.get)
    if asleep[worst] > usable:
        parts = f" ({_largest(update)})" if worst == "update" else ""
        chosen.problem = (f"the {worst} needs {asleep[worst] / GiB:.1f} GiB of the {usable / GiB:.1f} a GPU has "
                          f"for it{parts}")
    elif knobs.engine == "hf":   # the trainer's model generates, gathered whole in bf16 where it fits
        chosen.rollout = {"trainer": kept, "model gathered (bf16)": 2 * P}
    else:
        share = usable - kept                       # what vLLM may take, weights, runtime and KV cache
        sizes = tp_choices(node_gpus or gpus, knobs.tp)
        fitting = [tp for tp in sizes if 2 * P / tp + VLLM_RUNTIME < share]
        halves = [tp for tp in fitting if 2 * P / tp <= (share - VLLM_RUNTIME) / 2]
        chosen.tp = (halves or fitting or sizes[-1:])[0]
        weights = 2 * P / chosen.tp
        chosen.kv_tokens = int(max(0, share - VLLM_RUNTIME - weights) // kv_bytes_per_token(config, chosen.tp))
        chosen.vllm_share = round(share / gpu_bytes, 3)
        chosen.rollout = {"trainer": kept, "vLLM weights (bf16)": weights, "vLLM runtime": VLLM_RUNTIME,
                          "KV cache": max(0, share - VLLM_RUNTIME - weights)}
        groups = gpus // chosen.tp
        busiest = knobs.num_envs * max(knobs.plays_per_env, knobs.hint_plays)
        chosen.max_num_seqs = min(1024, 8 * math.ceil(math.ceil(busiest / groups) / 8))
        if chosen.kv_tokens < chosen.max_model_len:
            chosen.problem = (f"vLLM's KV cache holds {chosen.kv_tokens:,} tokens beside the trainer's "
                              f"{kept / GiB:.1f} GiB and its weights at tp {chosen.tp}, less than one context of "
                              f"{chosen.max_model_len:,}")
    chosen.phases = phase_bytes(config, shards, tokens, kept, update, chosen.rollout, chosen.kl)
    return chosen


def _largest(parts):
    top = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{name} {value / GiB:.1f}" for name, value in top)


def _what_fits(config, gpus, gpu_bytes, knobs, node_gpus=None):
    """The smallest change that fits: a --tp, a shorter --max-context, more GPUs; or that none of them does."""
    fits = lambda g, k: any(option(config, g, gpu_bytes, k, m, c, min(node_gpus or g, g)).problem is None
                            for m in ("fp32", "8bit") for c in (False, True))
    if knobs.tp and fits(gpus, replace(knobs, tp=0)):
        return "it fits without --tp (the plan's choice)"
    more = next((f"{g} GPUs" for g in (2, 4, 8, 16, 32, 64) if g > gpus and fits(g, knobs)), None)
    for context in (24576, 16384, 12288, 8192, 4096):
        if context < knobs.max_context and fits(gpus, replace(knobs, max_context=context, micro_token_budget=min(
                knobs.micro_token_budget, context))):
            return f"it fits with --max-context {context}" + (f" (or on {more})" if gpus == 1 and more else "")
    return f"it fits on {more}" if more else "no number of these GPUs up to 64 holds it"


# What holds each phase's memory (`phase_bytes`), for `spade.py plan`.
HOLDS = {"rollout": "vLLM awake: its weights, runtime and KV cache beside what the trainer keeps",
         "update": "vLLM asleep: gradients, FSDP2's gathered layers, a micro-batch's activations",
         "resume": "vLLM asleep: the optimizer's state made (zero gradients, a step) and read",
         "checkpoint": "vLLM asleep: each parameter gathered whole (fp32) on its way to the host",
         "KL reference's forward": "in the update: the reference's gathered layers beside the gradients",
         "first step's compile": "vLLM's graphs at its start (in its runtime), torchao's 8-bit step in the update"}


def main(argv, parse_config, settings):
    """`python spade.py plan [--gpus N] [--gpu-gib G] [--node-gpus N] [--knob VALUE ...]`: what a run of
    these knobs would choose on such GPUs and each phase's GiB per GPU, from the model's config alone (no
    GPU, no weights); or the one sentence of what does not fit and the smallest change that does."""
    import argparse
    parser = argparse.ArgumentParser(prog="spade.py plan", description=main.__doc__.split(": ", 1)[1],
                                     epilog="Any knob of a run may follow (python spade.py --help).")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs in all (default 1)")
    parser.add_argument("--gpu-gib", type=float, default=79.2,
                        help="one GPU's memory as torch reports it, GiB (default 79.2: an 80 GB H100)")
    parser.add_argument("--node-gpus", type=int, default=None, help="GPUs of one node (default: all of them)")
    args, knobs = parser.parse_known_args(argv)
    if (args.gpus < 1 or not RESERVED / GiB < args.gpu_gib < 2**30   # nan and inf are no size
            or args.node_gpus is not None and (args.node_gpus < 1 or args.gpus % args.node_gpus)):
        raise SystemExit("spade.py plan: --gpus must be positive, --node-gpus divide it, and --gpu-gib be a number "
                         f"of GiB over the {RESERVED / GiB:.0f} GiB a GPU keeps for CUDA")
    cfg = parse_config(knobs)
    engine = "hf" if cfg.engine == "hf" else "vllm"   # auto: vLLM, as requirements-gpu.txt installs it
    chosen = fitting(cfg, settings[cfg.setting], engine, args.gpus, int(args.gpu_gib * GiB), args.node_gpus)
    sequences = f"; at most {chosen.max_num_seqs} sequences at once" if chosen.max_num_seqs else ""
    lines = [f"{cfg.model} on {chosen.gpus} GPU{'s' * (chosen.gpus > 1)} of {chosen.gpu_bytes / GiB:.1f} GiB fits: "
             f"{chosen.summary()}{sequences}",
             f"{'phase':<24}{'GiB per GPU':>12}  what holds it"]
    lines += [f"{name:<24}{value / GiB:>12.1f}  {HOLDS[name]}" for name, value in chosen.phases.items()]
    lines.append(f"{'reserved':<24}{RESERVED / GiB:>12.1f}  the CUDA context, NCCL, vLLM asleep (an estimate)")
    return "\n".join(lines)


def fitting(cfg, setting, engine, gpus, gpu_bytes, node_gpus=None):
    """The plan of a run's config (spade.Config) and setting with `engine` ("vllm" or "hf") generating, on
    `gpus` GPUs of `gpu_bytes` (`node_gpus` of them a node); or the one sentence of what does not fit and
    the smallest change that does."""
    from backend import models
    if engine == "vllm" and cfg.tp and (node_gpus or gpus) % cfg.tp:   # an engine's ranks: one node's
        raise SystemExit(f"spade.py: --tp {cfg.tp} does not divide the {node_gpus or gpus} GPUs of a node into "
                         f"tensor-parallel groups (a group never spans two nodes)")
    try:
        config = models.model_config(cfg.model)
    except models.ModelLoadError as e:
        raise SystemExit(f"spade.py: {e}") from None
    values = {**asdict(cfg), **asdict(cfg.unflagged), "audit": setting.audit, "engine": engine}
    knobs = Knobs(**{knob.name: values[knob.name] for knob in fields(Knobs)})   # the Knobs by their config names
    chosen = plan(config, gpus, gpu_bytes, knobs, node_gpus)
    if chosen.problem:
        raise SystemExit(f"spade.py: {cfg.model} does not fit on {gpus} GPU{'s' * (gpus > 1)} of "
                         f"{gpu_bytes / GiB:.1f} GiB: {chosen.problem}")
    return chosen
