"""SPADE self-play: one model designs environments (as Python) and learns by playing them.

    python spade.py                                   # the embedded default: SmolLM2-135M on CPU, offline
    python spade.py --model Qwen3-4B                  # one GPU, the paper's settings (METHOD.md 7.3)
    python spade.py --model Qwen3-30B-A3B             # one node: a rank per GPU (launch.py), FSDP2
    python spade.py --pool envs/                      # baseline: fixed-pool GRPO, no designer
    python spade.py --rlve --model Qwen3-4B           # baseline: RLVE's environments (rlve.py)
    python spade.py --resume out/<run>                # carry on from the last checkpoint
    python spade.py report out/<run>                  # plots + an HTML page of the curriculum

Every step, in the paper's order (METHOD.md 0): every R steps the designer writes a new pool of
environments (designer.py; validated in sandbox.py), writes a hint for each and plays each one
with its hint (not trained: it measures what the hint is worth); the agent plays every pool
environment K times (agent.py); rewards become advantages (regret.py, batch.py): per-environment
z-scores for the agent, and for the designer the blend of a win-rate plateau and hint-based regret,
scored R steps later when the whole epoch is known (designer_rewards.py); memory records the new
environments; one PPO-clip + TIS update on designer and agent samples together (grpo.py); the new
weights go into the engine.

Deliberate simplifications: the batch is not trimmed or padded to a fixed size (the loss is a mean
over the samples present); with several GPUs every rank runs the same rollouts (one engine per rank,
vLLM tensor-parallel) and the update splits the samples between ranks; checkpoints keep the last
two (checkpoint.py). Ctrl-C finishes the step's checkpoint and exits. Thinking mode (--thinking, on
for Qwen3-8B as in the paper's 8B runs) trains each turn of an episode as its own sample, weighted so
that the episode counts once (agent.py). The two baselines replace the designer: --pool (fixed-pool
GRPO) and --rlve (RLVE's environments with their adaptive difficulty, rlve.py).
"""
import argparse
import contextlib
import dataclasses
import importlib.util
import inspect
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import designer_rewards   # pure reward math (no torch): safe to import before argument parsing
import regret
from batch import designer_metrics, drop_failed, group_rewards, num_agent_episodes, score_epoch, trained_agent_samples
from checkpoint import kl_reference, latest_checkpoint, restore, save_checkpoint
from launch import RankAgreement, agreed, install_sigint_handler, launch_ranks, setup_distributed

ROOT = Path(__file__).resolve().parent


@dataclass
class Config:
    model: str = "smollm2-135m"       # alias (Qwen3-30B-A3B, Qwen3-8B, Qwen3-4B, smollm2-135m, tiny) or path
    preset: str = "auto"              # paper | embedded | auto (embedded for smollm2-135m, tiny, tiny-moe)
    setting: str = "games"            # games | tool_use: skills, prompts and regeneration interval
    steps: int = 400                  # rollout steps (= policy updates)
    num_envs: int = 24                # G: environments per pool
    plays_per_env: int = 8            # K: trained plays of each environment per step
    regen_interval: int = 0           # R: steps per pool; 0 = the setting's (4 games, 8 tool use)
    hint_plays: int = 16              # hinted plays per new environment (not trained)
    skills: str = ""                  # comma-separated skill names; "" = all six of the setting
    skills_per_regen: int = 0         # skills per epoch; 0 = the setting's (3 games, 6 tool use; at most all)
    designer_attempts: int = 5        # validated tries per designer slot
    designer_reward: str = "blend"    # blend | solve_rate | regret_based | learning_potential
    plateau_band: str = "0.4,0.6,0.25"  # lo,hi,ramp of the win-rate plateau (4B later phase: 0.2,0.4,0.2)
    temperature: float = 0.6          # agent and designer sampling temperature
    top_p: float = 0.95               # nucleus sampling of agent and designer
    top_k: int = 20                   # top-k sampling of agent and designer
    hint_temperature: float = 0.3     # sampling temperature of the hint writer
    max_turns: int = 25               # agent turns per episode
    max_context: int = 32768          # tokens per episode
    max_new_tokens: int = 8192        # agent tokens per turn
    thinking: str = "auto"            # agent thinking, a sample per turn (METHOD 4.2): on, off, auto (on for Qwen3-8B)
    designer_max_tokens: int = 0      # tokens per environment written; 0 = the model's (16384; 20000 Qwen3-8B)
    hint_max_tokens: int = 0          # tokens per hint; 0 = the setting's (4096 games; tool use 2048, 512 Qwen3-4B)
    corpus: str = ""                  # JSONL with orig_doc/text; "" = built from the stdlib's docs
    corpus_max_words: int = 0         # document truncation; 0 = the setting's (6000 games, 4000 tool use)
    no_corpus: bool = False           # ablation: no grounding document
    no_memory: bool = False           # ablation: no environment memory
    no_designer_training: bool = False  # ablation: designer samples are generated but not trained
    pool: str = ""                    # baseline: fixed pool (directory of .py or JSONL); no designer
    rlve: bool = False                # baseline: 16 RLVE environments, adaptive difficulty (rlve.py); no designer
    lr: float = 1e-6                  # AdamW learning rate (constant)
    kl_coef: float = -1.0             # k3 KL to the initial model; -1 = the paper's (0.005 tool use and 8B, else 0)
    micro_token_budget: int = 16384   # tokens per micro-batch in the update
    engine: str = "auto"              # hf | vllm | auto (vllm on CUDA when installed)
    out: str = "out"                   # where runs are written
    run: str = ""                     # run name; "" = a timestamp
    save_every: int = 16              # checkpoint every N steps (and at the end)
    resume: str = ""                  # a run directory to continue (its saved config; more --steps extend it)
    seed: int = 0                     # seeds python and torch RNGs
    wandb: bool = False               # also log metrics to Weights & Biases

    def derive(self):
        """Fill the values that depend on others (METHOD 7.3's columns), then check the whole config once."""
        if self.setting not in ("games", "tool_use"):   # first: the skills and the defaults depend on it
            raise SystemExit(f"spade.py: --setting must be games or tool_use, not {self.setting!r}")
        tool_use, model, skills = self.setting == "tool_use", self.model.lower(), self.skill_list()
        num_skills = len(skills)
        self.regen_interval = self.regen_interval or (8 if tool_use else 4)
        self.skills_per_regen = self.skills_per_regen or min(6 if tool_use else 3, num_skills)
        self.corpus_max_words = self.corpus_max_words or (4000 if tool_use else 6000)
        self.hint_max_tokens = self.hint_max_tokens or ((512 if "qwen3-4b" in model else 2048) if tool_use else 4096)
        self.designer_max_tokens = self.designer_max_tokens or (20000 if "qwen3-8b" in model else 16384)
        if self.thinking == "auto":
            self.thinking = "on" if "qwen3-8b" in model else "off"
        if self.kl_coef < 0:
            self.kl_coef = 0.005 if tool_use or "qwen3-8b" in model else 0.0
        self.run = self.run or time.strftime("%Y%m%d-%H%M%S")
        problems = [msg for bad, msg in [
            (self.plays_per_env < 2, "--plays-per-env must be at least 2 (advantages compare plays)"),
            (self.num_envs < 1 or self.steps < 1, "--num-envs and --steps must be positive"),
            (self.skills_per_regen > num_skills and not self.pool,
             f"--skills-per-regen {self.skills_per_regen} is more than the {num_skills} skills in play: {skills}"),
            (self.plateau() is None, f"--plateau-band must be lo,hi,ramp with 0 <= lo < hi <= 1 and ramp > 0, "
                                     f"not {self.plateau_band!r}"),
            (self.preset not in ("auto", "paper", "embedded"), f"--preset must be auto, paper or embedded, not {self.preset!r}"),
            (self.engine not in ("auto", "hf", "vllm"), f"--engine must be auto, hf or vllm, not {self.engine!r}"),
            (self.thinking not in ("on", "off"), f"--thinking must be on, off or auto, not {self.thinking!r}"),
            (self.designer_reward not in designer_rewards.DESIGNER_REWARDS,
             f"unknown --designer-reward {self.designer_reward!r}; one of {list(designer_rewards.DESIGNER_REWARDS)}"),
            (bool(self.corpus) and not Path(self.corpus).is_file(), f"corpus file not found: {self.corpus}"),
            (bool(self.pool) and not Path(self.pool).exists(), f"pool not found: {self.pool}"),
            (self.rlve and bool(self.pool), "--rlve and --pool are two baselines: give one"),
            (self.engine == "vllm" and importlib.util.find_spec("vllm") is None,
             "--engine vllm needs vLLM (requirements-gpu.txt; `make test-vllm` builds its CPU version)"),
            (self.wandb and importlib.util.find_spec("wandb") is None,
             "--wandb needs the wandb package (pip install wandb)")]
            if bad]
        if problems:
            raise SystemExit(f"spade.py: {problems[0]}")
        if self.rlve:
            import rlve
            try:
                rlve.gym()   # rlve-gym's registries import (a missing or broken install: one sentence)
            except ImportError as e:
                raise SystemExit(f"spade.py: {e}")
        return self

    def plateau(self):
        """--plateau-band as score_designer_batch's keywords {lo, hi, ramp}; None when malformed."""
        try:
            lo, hi, ramp = (float(x) for x in self.plateau_band.split(","))
        except ValueError:
            return None
        return dict(lo=lo, hi=hi, ramp=ramp) if 0 <= lo < hi <= 1 and ramp > 0 else None

    def skill_list(self):
        from envs import GAME_SKILLS, TOOL_SKILLS
        known = GAME_SKILLS if self.setting == "games" else TOOL_SKILLS
        names = [s.strip() for s in self.skills.split(",") if s.strip()] or list(known)
        unknown = [s for s in names if s not in known]
        if unknown:
            raise SystemExit(f"spade.py: unknown {self.setting} skill(s) {unknown}; known: {list(known)}")
        return names


# What a resumed run may change of its saved config.
RESUMABLE = ("resume", "steps", "save_every", "engine", "wandb")
# The fixed-RLVE baseline's own values (METHOD.md 10): 16 plays of each problem at temperature 1.
RLVE = dict(plays_per_env=16, temperature=1.0)
# The embedded default: a real loop that finishes in minutes on a 2-core CPU (and tests with `tiny`).
EMBEDDED = dict(steps=4, num_envs=2, plays_per_env=2, regen_interval=2, hint_plays=2, skills_per_regen=2,
                designer_attempts=1, max_turns=3, max_context=3072, max_new_tokens=48,
                designer_max_tokens=256, hint_max_tokens=48, micro_token_budget=4096, lr=1e-5, corpus_max_words=300,
                save_every=2)
EMBEDDED_SKILLS = {"games": "Mathematical Reasoning,Pattern Recognition",
                   "tool_use": "Data Retrieval,State Modification"}


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog="python spade.py report out/<run>: a run's plots and HTML page (report.py)")
    meaning = dict(re.findall(r"^    (\w+): .*?#\s*(.+)$", inspect.getsource(Config), re.M))  # the comments above
    for field in dataclasses.fields(Config):
        flag, text = "--" + field.name.replace("_", "-"), f"{meaning.get(field.name, '')} (default: {field.default})"
        if field.type is bool:
            parser.add_argument(flag, action="store_true", help=text)
        else:
            parser.add_argument(flag, type=field.type, default=None, help=text)
    # Given = on the command line; `is not` keeps an explicit 0 (e.g. --kl-coef 0 for tool use).
    given = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None and v is not False}
    if given.get("resume"):
        return resumed_config(given)
    cfg = Config(**given)
    small = cfg.model.lower() in ("smollm2-135m", "tiny", "tiny-moe")
    embedded = cfg.preset == "embedded" or (cfg.preset == "auto" and small)
    preset = {**EMBEDDED, "skills": EMBEDDED_SKILLS.get(cfg.setting, "")} if embedded else {}
    return Config(**{**(RLVE if cfg.rlve else {}), **preset, **given}).derive()


def resumed_config(given):
    """--resume: the run's saved config, with what RESUMABLE lets a command line change (more --steps extend
    it; --wandb holds for this invocation only). Any other flag that changes the config is refused in one
    sentence; both sides are derived first, so `--thinking auto` matches a saved "off"."""
    latest = Path(given["resume"]) / "latest"
    if not latest.is_file():
        raise SystemExit(f"spade.py: no checkpoint to resume in {given['resume']} (--resume takes a run's "
                         f"directory, the one that holds `latest`)")
    pointer = json.loads(latest.read_text())
    try:
        saved = Config(**{**pointer["config"], "wandb": False}).derive()   # derive: fields newer than the run
    except TypeError as e:
        raise SystemExit(f"spade.py: {latest} was written by another version of spade.py ({e})")
    wanted = Config(**{**dataclasses.asdict(saved), **given}).derive()
    changed = [f"--{f.name.replace('_', '-')} (saved: {getattr(saved, f.name)})" for f in dataclasses.fields(Config)
               if f.name not in RESUMABLE and getattr(wanted, f.name) != getattr(saved, f.name)]
    if changed:
        raise SystemExit(f"spade.py: a resumed run keeps its saved config; {', '.join(changed)} cannot "
                         f"change (these can: {', '.join('--' + k.replace('_', '-') for k in RESUMABLE)})")
    if wanted.steps <= pointer["step"]:
        raise SystemExit(f"spade.py: {given['resume']} is at step {pointer['step']} already: give more --steps")
    return wanted


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        import report
        return report.main(argv[1:])
    cfg = parse_config(argv)
    if "RANK" not in os.environ:                     # several GPUs: one rank per GPU (launch.py)
        import torch
        if torch.cuda.device_count() > 1:
            print(f"spade.py: {torch.cuda.device_count()} GPUs: starting one rank per GPU "
                  "(CUDA_VISIBLE_DEVICES=0 for one)", flush=True)
            sys.exit(launch_ranks(argv, torch.cuda.device_count(), __file__))
    else:  # a rank: FSDP2 with torchao's compiled 8-bit AdamW step
        # Trap (torch 2.13 + torchao 0.18): AOT autograd's on-disk cache mixes up the DTensor-wrapped
        # 8-bit optimizer states, so every run after the first on a machine dies in optimizer.step
        # ("'Tensor' object has no attribute 'codes'"). Read once, when torch is imported: set it first.
        os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    import torch
    import agent, designer, engine, grpo, models, report, rlve, sandbox
    from corpus import builtin_corpus, load_corpus
    from envs import load_pool
    rank, world = setup_distributed()
    run_dir = Path(cfg.resume) if cfg.resume else Path(cfg.out) / cfg.run
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(run_dir) if cfg.resume else None
    log = report.Log(run_dir, cfg, rank)
    random.seed(cfg.seed), torch.manual_seed(cfg.seed)

    # --- the sandbox every environment runs in: started first, so a machine that cannot isolate
    # model-written code stops here, in one sentence (RLVE's environments are a package's, not a model's)
    if not cfg.rlve:
        try:
            log.print("sandbox: " + ", ".join(k for k, v in sandbox.isolation().items() if not v.startswith("missing")))
        except RuntimeError as e:
            raise SystemExit(f"spade.py: {e}")

    # --- what the environments grow from: the grounding corpus, or the baseline's fixed pool ---------
    # (read before the model loads: a bad file is then an error in seconds, not after minutes)
    words = cfg.corpus_max_words
    try:
        fixed_pool = load_pool(cfg.pool) if cfg.pool else None
        corpus = None if cfg.no_corpus or cfg.pool or cfg.rlve else (
            load_corpus(cfg.corpus, words, seed=42) if cfg.corpus else builtin_corpus(words, seed=42))
    except (OSError, ValueError) as e:   # a missing or empty corpus; a pool with no valid or intact files
        raise SystemExit(f"spade.py: {e}")

    # --- the model, its two views (trainer + engine), the KL reference, the optimizer ---------------
    device = "cuda" if torch.cuda.is_available() else "cpu"
    load = models.load_sharded if world > 1 else models.load_model   # several ranks: FSDP2 shards
    try:
        model, tokenizer = load(str(checkpoint / "model") if checkpoint else cfg.model)
        ref_model = kl_reference(cfg, model, resumed=checkpoint is not None, sharded=world > 1)
    except (OSError, ValueError, models.ModelLoadError) as e:   # an unknown model: one sentence, no trace
        raise SystemExit(f"spade.py: {e}")
    vllm_here = device == "cuda" and importlib.util.find_spec("vllm") is not None
    kind = cfg.engine if cfg.engine != "auto" else ("vllm" if vllm_here else "hf")
    gen = engine.make_engine(model, tokenizer, kind)
    gen = RankAgreement(gen) if world > 1 else gen           # ranks must ask for the same prompts (launch.py)
    optimizer = grpo.make_optimizer(model, lr=cfg.lr)
    agent_params = engine.SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens)
    designer_params = dataclasses.replace(agent_params, max_new_tokens=cfg.designer_max_tokens)
    hint_params = engine.SamplingParams(cfg.hint_temperature, top_p=0.9, top_k=0, max_new_tokens=cfg.hint_max_tokens)
    # Tool use: the policy's solvability audit of each environment that passed the gate (METHOD 3.1 step 4).
    audit_params = engine.SamplingParams(0.3, top_p=0.9, top_k=0, max_new_tokens=min(16384, cfg.designer_max_tokens)) \
        if cfg.setting == "tool_use" else None

    # --- environment memory, seed environments, the run's state ------------------------------------
    skills = cfg.skill_list()
    seeds = [e for e in load_pool(ROOT / "envs", validate=False) if e.skill in skills]
    memory = None if cfg.no_memory or cfg.pool or cfg.rlve else designer.EnvMemory(run_dir / "env_memory.json")
    # pool_rng: the fixed pool's own shuffle, seed 42 as the paper's baseline (METHOD 10).
    state = dict(step=0, pool=[], epoch=None, tracker=designer_rewards.LearningPotentialTracker(), order=[],
                 rng=random.Random(cfg.seed), pool_rng=random.Random(42), blacklist=set(),
                 rlve=rlve.Curriculum() if cfg.rlve else None)
    if checkpoint:
        state = restore(checkpoint, optimizer, memory, corpus, rank)
        log.print(f"resumed {run_dir} at step {state['step']} from {checkpoint.name}")
    elif memory is not None and not memory.records:
        memory.seed_from(seeds)
    log.config()
    stop = install_sigint_handler()

    for step in range(state["step"], cfg.steps):
        times, metrics, start = {}, {"step": step}, time.perf_counter()
        regen = fixed_pool is None and not cfg.rlve and step % cfg.regen_interval == 0
        finished = []                                        # epochs whose designer samples are scored now
        if fixed_pool is not None:                           # baseline: a fixed pool, no designer
            state["pool"] = next_from_pool(fixed_pool, state, cfg.num_envs)
        elif regen:
            # 1. The designer writes a new pool (validated in the sandbox), then a hint per environment,
            #    then the agent plays each new environment with its hint: R_hint (never trained on).
            with timer(times, "design"):
                epoch = step // cfg.regen_interval
                slots = designer.slots_for_epoch(skills, epoch, cfg.skills_per_regen, cfg.num_envs)
                new_envs, samples, stats = designer.design(
                    gen, tokenizer, slots, corpus=corpus, memory=memory, setting=cfg.setting,
                    params=designer_params, max_attempts=cfg.designer_attempts, rng=state["rng"], rollout_id=step,
                    audit_params=audit_params)
                metrics.update({"designer/valid_rate": stats["num_valid"] / len(slots),
                                "designer/attempts": stats["num_attempts"]})
            with timer(times, "hints"):
                hints = designer.write_hints(gen, tokenizer, new_envs, cfg.setting, hint_params) \
                    if cfg.designer_reward in designer_rewards.NEEDS_HINTS else []
                hinted = agent.play(new_envs, gen, tokenizer, cfg.hint_plays, hints or None, params=agent_params,
                                    seeds=[agent.play_seeds(e.env_id, cfg.hint_plays, step) for e in new_envs],
                                    **play_limits(cfg)) if hints else []
                scored_hinted, hung = drop_failed(hinted, state["blacklist"])
            topup = state["rng"].sample(seeds, min(len(seeds), max(0, cfg.num_envs - len(new_envs))))
            if topup:
                log.print(f"designer: {len(new_envs)}/{cfg.num_envs} valid; topping up the pool with "
                          f"{len(topup)} seed environments from envs/ (not rewarded to the designer)")
            finished.append(state["epoch"])                  # the previous epoch: all its plays are known
            state["pool"] = new_envs + topup
            state["epoch"] = dict(t0=step, envs=new_envs, samples=samples, hints=hints,
                                  hinted=group_rewards(scored_hinted), window={e.env_id: [] for e in new_envs},
                                  timeouts=hung, hinted_episodes=hinted, rejected=stats["failures"])
        # 2. The agent plays every pool environment K times (trained); advantages z-scored per environment.
        #    Seeds are per play and salted by step; at a regen step the hinted plays above used the same
        #    seeds, so both arms of the regret meet the same instances (METHOD 13.3).
        #    FAILED plays (hangs, crashes, load or tool failures) are dropped, and a game that hung is
        #    never played again (METHOD 3.3).
        pool = [e for e in state["pool"] if e.env_id not in state["blacklist"]]
        with timer(times, "play"):
            play_stats = {}
            if cfg.rlve:                                     # baseline: a new RLVE problem per environment
                names = next_from_pool(rlve.ENVIRONMENTS, state, cfg.num_envs)
                played = rlve.play_round(state["rlve"], names, state["rng"], gen, tokenizer, cfg.plays_per_env,
                                         params=agent_params, max_context=cfg.max_context, stats=play_stats,
                                         max_new_tokens=cfg.max_new_tokens, thinking=cfg.thinking == "on")
                metrics.update(state["rlve"].metrics())
            else:
                played = agent.play(pool, gen, tokenizer, cfg.plays_per_env, params=agent_params,
                                    seeds=[agent.play_seeds(e.env_id, cfg.plays_per_env, step) for e in pool],
                                    stats=play_stats, **play_limits(cfg))
        episodes, hung = drop_failed(played, state["blacklist"])
        rewards = group_rewards(episodes)
        agent_samples = trained_agent_samples(episodes, compact_filter=cfg.setting == "tool_use")
        metrics["agent/samples"] = len(agent_samples)
        epoch = state["epoch"]
        if epoch is not None:                                # accumulate the epoch's unhinted rewards per env
            for env_id, window in epoch["window"].items():
                window.append(rewards.get(env_id, []))
            epoch["timeouts"] |= hung
        # 3. Memory records each new environment with its win rate and regret at the regen step.
        if regen:
            metrics.update(remember_new_envs(epoch, rewards, played, memory, log, step))
        if step % cfg.regen_interval == 0:                   # what the agent played, for people: the pool's
            log.plays(step, played, rewards)                 # every environment, topped-up seeds included
        # 4. The delayed designer rewards (D = R): the epoch that ended at this regen step, and on the
        #    last step the open epoch with whatever plays it has, even one begun now (METHOD 6.2 step 5).
        #    The role scale counts this step's agent samples, compact-filtered ones too (METHOD 6.2 step 4);
        #    a thinking episode counts once, as in the loss.
        if step == cfg.steps - 1:
            finished.append(state["epoch"])
            state["epoch"] = None
        designer_batch = [scored for done in finished for scored in score_epoch(
            done, cfg, state["tracker"], num_agent=num_agent_episodes(episodes))]
        metrics.update(designer_metrics(designer_batch))
        # 5. One PPO-clip + TIS update on designer and agent samples together, then push the weights.
        #    Every rank passes the whole batch: accumulate_gradients trains each rank on its share.
        batch = ([] if cfg.no_designer_training else [s for s, _ in designer_batch]) + agent_samples
        with timer(times, "update"):
            gen.sleep()
            update = grpo.update(model, optimizer, batch, micro_token_budget=cfg.micro_token_budget,
                                 temperature=cfg.temperature,
                                 activation_checkpointing=device == "cuda",   # activations, not weights, fill a GPU
                                 kl_coef=cfg.kl_coef, ref_model=ref_model) if batch else {}
            grpo.push_weights(model, gen)
        # 6. Log one line; save a checkpoint every N steps, at the end, and on Ctrl-C.
        state["step"] = step + 1
        metrics.update(report.step_metrics(played, episodes, rewards, update, play_stats, times, start))
        log.step(metrics)
        stopping = agreed(stop, world)                   # every rank stops after the same step
        if state["step"] % cfg.save_every == 0 or state["step"] == cfg.steps or stopping:
            save_checkpoint(run_dir, cfg, model, tokenizer, optimizer, memory, corpus, state, rank)
        if stopping:
            log.print(f"interrupted: saved step {state['step']}; continue with --resume {run_dir}")
            return
    if rank == 0:
        report.main([str(run_dir)])


# --- the phases' small helpers -------------------------------------------------------------------
def play_limits(cfg):
    """The per-play settings of both arms (hinted and trained plays think alike: agent.py)."""
    return dict(max_turns=cfg.max_turns, max_context=cfg.max_context, max_new_tokens=cfg.max_new_tokens,
                thinking=cfg.thinking == "on")


def remember_new_envs(epoch, rewards, episodes, memory, log, step):
    """Memory records each new environment with its win rate and raw regret at the regen step
    (METHOD 8); the step's samples are dumped for people. Returns the dump's metrics."""
    scores = {}
    for env in epoch["envs"]:
        step0 = rewards.get(env.env_id, [])
        raw = designer_rewards.EnvOutcome(env.skill, [step0], epoch["hinted"].get(env.env_id, [])).regret
        scores[env.env_id] = dict(win_rate=regret.win_rate(step0), regret=raw)
        if memory is not None:
            memory.add(env.env_id, env.skill, env.code, scores[env.env_id]["win_rate"], raw, step)
    if memory is not None:
        memory.save()
    metrics = log.samples(step, epoch, episodes, scores)
    del epoch["hinted_episodes"], epoch["rejected"]   # on disk now; keep checkpoints small
    return metrics


def next_from_pool(pool, state, n):
    """Fixed-pool baseline: n environments without replacement, reshuffled when exhausted."""
    chosen = []
    while len(chosen) < min(n, len(pool)):
        if not state["order"]:
            state["order"] = list(range(len(pool)))
            state["pool_rng"].shuffle(state["order"])
        chosen.append(pool[state["order"].pop()])
    return chosen


@contextlib.contextmanager
def timer(times, name):
    """Adds the block's wall time to times[name] (a phase may run twice in a step)."""
    start = time.perf_counter()
    yield
    times[name] = times.get(name, 0.0) + time.perf_counter() - start


if __name__ == "__main__":
    main()
