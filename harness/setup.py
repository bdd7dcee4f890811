"""A run's set-up: its directory, the sandbox, the corpus or a baseline's pool, the model and its engine,
the KL reference, the optimizer, memory and the loop state, fresh or resumed (harness/checkpoint.py).

    run = set_up(cfg, spade.SETTINGS[cfg.setting])    # then spade.train(run)

What can go wrong before the first step (no isolation here, a corpus or pool that cannot be read, a model
or checkpoint that cannot be loaded, a --tp that does not fit) is one sentence, before the model loads
where it can be.
"""
import dataclasses
import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path

import designer
import regret
import sandbox
from baselines import rlve
from designer import builtin_corpus, load_corpus
from envs import load_pool
from backend import engine, models
from harness import report, sync
from harness.checkpoint import claimed, damaged, kl_reference, read_pointer, restore
from backend.launch import (RankAgreement, TensorParallelGroup, from_rank_0, install_sigint_handler, node_size,
                          restarts, setup_distributed)

ROOT = Path(__file__).resolve().parents[1]   # the project: envs/ and the settings' seed pools


@dataclass
class Run:
    """What the loop works with, set up once (`set_up`). `state` is what checkpoints keep."""
    cfg: object        # spade.Config
    dir: Path
    log: object
    rank: int
    world: int
    device: str
    corpus: object
    fixed_pool: list | None
    model: object
    tokenizer: object
    gen: object
    ref_model: object
    optimizer: object
    params: dict
    skills: list
    seeds: list
    memory: object
    state: dict
    setting: object    # designer.Setting: what makes this run's setting (spade.SETTINGS)
    stop: object       # set by Ctrl-C (launch.install_sigint_handler)
    probe: list        # token sequences the engine and the trainer score before every step (harness/sync.py)


def set_up(cfg, setting):
    """The Run of a checked Config and its setting: a fresh one, or one resumed from its last checkpoint."""
    import torch
    rank, world = setup_distributed()
    cfg.out = from_rank_0(cfg.out, world)   # one start time in out/{time}: rank 0's
    run_dir = Path(cfg.resume or cfg.out)
    restarted = restarts() > 0 and not cfg.resume   # torchrun restarted it before its first checkpoint
    with claimed(run_dir, bool(cfg.resume), rank, world, restarted):   # a run that fails early leaves no directory
        pointer = read_pointer(run_dir) if cfg.resume else None
        checkpoint = run_dir / pointer["checkpoint"] if pointer else None
        log = report.Log(run_dir, cfg, rank)
        if restarted:
            log.rewind(0)   # what the lost attempt logged: its steps are played again
        random.seed(cfg.seed), torch.manual_seed(cfg.seed)
        isolation, fixed_pool, corpus = sandbox_and_inputs(cfg, log)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        chosen = memory_plan(cfg, setting, world, node_size(world), log) if device == "cuda" else None
        model, tokenizer, gen, ref_model, optimizer, params = load_trainer(
            cfg, checkpoint, device, world, step=pointer["step"] if pointer else 0, chosen=chosen)
    skills = cfg.skill_list()
    seeds = [e for e in load_pool(ROOT / (cfg.unflagged.seed_pool or setting.seeds), validate=False) if e.skill in skills]
    memory = None if cfg.no_memory or cfg.pool or cfg.rlve else designer.EnvMemory(run_dir / "env_memory.json")
    # pool_rng: the fixed pool's own shuffle, seed 42 as the paper's baseline (METHOD 10).
    state = dict(step=0, pool=[], epoch=None, tracker=regret.LearningPotentialTracker(), order=[],
                 rng=random.Random(cfg.seed), pool_rng=random.Random(42), blacklist=set(), lengths={},
                 rlve=rlve.Curriculum() if cfg.rlve else None)
    if checkpoint:   # the engine asleep (load_trainer): the optimizer's state is made where the plan has room
        state = restore(checkpoint, model, optimizer, memory, rank)
        log.rewind(state["step"])
        log.print(f"resumed {run_dir} at step {state['step']} from {checkpoint.name}")
        if state["step"] == pointer["config"].get("steps") and not (cfg.pool or cfg.rlve):   # a config may lack it
            log.print("extending a finished run: its last step scored the open epoch early (METHOD.md 6.2), "
                      "so it trains no designer samples until its next regen step")
    elif memory is not None and not memory.records:
        memory.seed_from(seeds)
    log.config(sandbox=isolation)
    probe = sync.probe_sequences(tokenizer, setting, skills, seeds, cfg.max_turns)
    return Run(cfg, run_dir, log, rank, world, device, corpus, fixed_pool, model, tokenizer, gen, ref_model,
               optimizer, params, skills, seeds, memory, state, setting, install_sigint_handler(), probe)


def sandbox_and_inputs(cfg, log):
    """(the sandbox's isolation, the fixed pool, the corpus). The sandbox every environment runs in is
    started first, so a machine that cannot isolate model-written code stops here, in one sentence (RLVE's
    environments are a package's). What the environments grow from, the corpus or a fixed pool, is read
    before the model loads: a bad file is an error in seconds."""
    try:
        isolation = None if cfg.rlve else sandbox.summary()   # the layers that hold, and any missing
        if isolation:
            log.print("sandbox: " + isolation)
        fixed_pool = load_pool(cfg.pool, max_turns=cfg.max_turns) if cfg.pool else None
        words = cfg.unflagged.corpus_max_words
        corpus = None if cfg.corpus == "none" or cfg.pool or cfg.rlve else (
            load_corpus(cfg.corpus, words) if cfg.corpus else builtin_corpus(words))
    except (OSError, ValueError, RuntimeError) as e:   # no isolation; a missing or empty corpus; a broken pool
        raise SystemExit(f"spade.py: {e}")
    return isolation, fixed_pool, corpus


def engine_kind(cfg, device):
    vllm_here = device == "cuda" and importlib.util.find_spec("vllm") is not None
    return cfg.engine if cfg.engine != "auto" else ("vllm" if vllm_here else "hf")


def memory_plan(cfg, setting, gpus, node_gpus=None, log=None):
    """harness/plan.py's plan of this run on these GPUs (`node_gpus` of them a node), printed to `log`, before
    the model loads; or one sentence naming the smallest change that fits."""
    import torch
    from harness import plan
    card = torch.cuda.get_device_properties(0).total_memory
    chosen = plan.fitting(cfg, setting, engine_kind(cfg, "cuda"), gpus, card, node_gpus)
    if log:
        log.print("memory plan: " + chosen.summary())
    return chosen


def load_trainer(cfg, checkpoint, device, world, step=0, chosen=None):
    """The model, its two views (trainer + engine), the KL reference, the optimizer, the sampling params;
    `step`: the checkpoint's; `chosen`: the memory plan of a GPU run. On a GPU (one or several) the model
    is sharded by FSDP2 with fp32 master weights computing in bf16 (models.shard_model); on one CPU
    process it is a plain fp32 model."""
    import grpo
    import torch
    sharded = world > 1 or device == "cuda"
    compute = torch.bfloat16 if device == "cuda" else None
    load = (lambda name: models.load_sharded(name, compute_dtype=compute)) if sharded else models.load_model
    from safetensors import SafetensorError   # a truncated weights file
    problems = (OSError, ValueError, models.ModelLoadError, SafetensorError)   # one sentence each, no trace
    try:
        model, tokenizer = load(str(checkpoint / "model") if checkpoint else cfg.model)
    except (torch.OutOfMemoryError, torch.distributed.DistError):   # the machine's, not the files'
        raise
    except (*problems, TypeError, AttributeError, RuntimeError) as e:   # transformers' of files that are no model's
        raise damaged(checkpoint, e) if checkpoint else SystemExit(f"spade.py: {e}") from None
    try:
        ref_model = kl_reference(cfg, model, resumed=checkpoint is not None, sharded=sharded,
                                 offload=bool(chosen and chosen.kl_on_cpu))
    except problems as e:
        raise SystemExit(f"spade.py: {e}") from None
    kind = engine_kind(cfg, device)
    tp = engine_tp(cfg, kind, world, chosen)
    # vLLM's sampling stream, which no checkpoint holds: one per --seed, and another after each resume
    seed = (cfg.seed + step) % 2**31   # numpy's range
    sizes = dict(max_model_len=chosen.max_model_len, max_num_seqs=chosen.max_num_seqs,
                 gpu_memory_utilization=chosen.vllm_share) if chosen else {}
    gen = engine.make_engine(model, tokenizer, kind, **({"tp": tp, "seed": seed, **sizes} if kind == "vllm" else {}))
    gen = TensorParallelGroup(gen, tp, world) if kind == "vllm" and world > 1 else gen
    gen = RankAgreement(gen) if world > 1 else gen           # in lockstep, ranks must ask for the same prompts
    # Asleep until spade.train's first weight push: a resume (set_up) makes the optimizer's state (zero
    # gradients and a step, then the moments read) in vLLM's memory, not beside it (harness/plan.py's phases).
    gen.sleep()
    agent_params = engine.SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens)
    params = dict(agent=agent_params,
                  designer=dataclasses.replace(agent_params, max_new_tokens=cfg.unflagged.designer_max_tokens),
                  hint=engine.SamplingParams(cfg.unflagged.hint_temperature, top_p=0.9, top_k=0,
                                             max_new_tokens=cfg.unflagged.hint_max_tokens),
                  # where the setting audits: the policy's verdict on what passed the gate (3.1 step 4)
                  audit=engine.SamplingParams(0.3, top_p=0.9, top_k=0,
                                              max_new_tokens=min(16384, cfg.unflagged.designer_max_tokens)))
    optimizer = grpo.make_optimizer(model, lr=cfg.lr, moments=chosen.moments if chosen else "fp32")
    return model, tokenizer, gen, ref_model, optimizer, params


def engine_tp(cfg, kind, world, chosen):
    """vLLM's tensor-parallel size: the memory plan's (--tp, or the smallest that fits), --tp or 1 on CPU
    ranks. The in-process engine is one rank a group."""
    if kind != "vllm" or world == 1:
        if cfg.tp > 1:
            raise SystemExit(f"spade.py: --tp {cfg.tp} needs --engine vllm and as many ranks (GPUs)")
        return 1
    tp, node = chosen.tp if chosen else (cfg.tp or 1), node_size(world)
    if node % tp:
        raise SystemExit(f"spade.py: --tp {tp} does not divide the {node} ranks of a node into tensor-parallel "
                         f"groups (a group never spans two nodes)")
    return tp
