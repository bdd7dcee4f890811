"""SPADE self-play: one model designs environments (as Python) and learns by playing them.

    python spade.py                                   # the embedded default: SmolLM2-135M on CPU, offline
    python spade.py --model Qwen3-4B                  # one GPU, the paper's settings (METHOD.md 7.3)
    python spade.py --model Qwen3-30B-A3B             # one node: a rank per GPU (launch.py), FSDP2
    python spade.py --pool envs/                      # baseline: fixed-pool GRPO, no designer
    python spade.py --rlve --model Qwen3-4B           # baseline: RLVE's environments (rlve.py)
    python spade.py --resume out/<run>                # carry on from the last checkpoint
    python spade.py report out/<run>                  # plots + an HTML page of the curriculum

Every step (`self_play_step`), in the paper's order (METHOD.md 0): every R steps the designer writes a
new pool of environments (`regen_pool`: designer.py; validated in gate.py), writes a hint for each
and plays each one with its hint (not trained: it measures what the hint is worth); the agent plays
every pool environment K times (agent.py); rewards become advantages (regret.py, batch.py):
per-environment z-scores for the agent, and for the designer the blend of a win-rate plateau and
hint-based regret, scored R steps later when the whole epoch is known; memory records the new
environments; one PPO-clip + TIS update on designer and agent samples together (grpo.py); the new
weights go into the engine.

Deliberate simplifications: the batch is not trimmed or padded to a fixed size (the loss is a mean
over the samples present); with several GPUs the ranks divide each step's plays and designer slots
(`divided`, launch.py: the in-process engine holds the model whole for a phase, vLLM's ranks form
tensor-parallel groups), every rank then holding all of them, and the update splits the samples
between ranks; checkpoints keep the last two (checkpoint.py). Ctrl-C finishes the step's checkpoint
and exits. Thinking mode (--thinking, on for Qwen3-8B as in the paper's 8B runs) trains each turn of
an episode as its own sample, weighted so that the episode counts once (agent.py). The two baselines
replace the designer where a step's plays come from (`run.plays`: `fixed_pool_plays`, `rlve_plays`):
--pool (fixed-pool GRPO) and --rlve (RLVE's environments with their adaptive difficulty, rlve.py).
Set-up is `set_up` and `load_trainer`.
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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import regret   # pure reward math (no torch): safe to import before argument parsing
from batch import agent_metrics, designer_metrics, drop_failed, group_rewards, num_agent_episodes, score_epoch, trained_agent_samples
from infra.checkpoint import claim, damaged, kl_reference, read_pointer, restore, save_checkpoint
from infra.launch import (RankAgreement, TensorParallelGroup, agreed, from_rank_0, gather, install_sigint_handler,
                    launch_ranks, reseed, setup_distributed, share)

# The modules that import torch are imported where they are first used, after the arguments have been
# checked: a bad flag is one sentence in a second, not after torch has loaded.
ROOT = Path(__file__).resolve().parent


@dataclass
class Config:
    """The thirty knobs. Each default is the paper's (METHOD.md 7.3: games, Qwen3-30B-A3B); a setting's,
    a model's and the embedded preset's own values (the tables below) apply over them, and what the
    command line gives always wins."""
    model: str = "smollm2-135m"       # alias (Qwen3-30B-A3B, Qwen3-8B, Qwen3-4B, smollm2-135m, tiny) or path
    setting: str = "games"            # games | tool_use: skills, prompts and the setting's column of METHOD 7.3
    steps: int = 400                  # rollout steps (= policy updates)
    num_envs: int = 24                # G: environments per pool
    plays_per_env: int = 8            # K: trained plays of each environment per step
    regen_interval: int = 4           # R: steps per pool (8 for tool use)
    skills: str = ""                  # comma-separated skill names; "" = all six of the setting
    designer_reward: str = "blend"    # blend | solve_rate | regret_based | learning_potential
    plateau_band: str = "0.4,0.6,0.25"  # lo,hi,ramp of the win-rate plateau (4B later phase: 0.2,0.4,0.2)
    temperature: float = 0.6          # agent and designer sampling temperature
    top_p: float = 0.95               # nucleus sampling of agent and designer
    top_k: int = 20                   # top-k sampling of agent and designer (0: off)
    max_turns: int = 25               # agent turns per episode
    max_context: int = 32768          # tokens per episode
    max_new_tokens: int = 8192        # agent tokens per turn
    thinking: str = "off"             # agent thinking, a sample per turn (METHOD 4.2): on | off (on for Qwen3-8B)
    corpus: str = ""                  # JSONL with orig_doc/text; "" = built from the stdlib's docs; none = ablation
    no_memory: bool = False           # ablation: no environment memory
    no_designer_training: bool = False  # ablation: designer samples are generated but not trained
    pool: str = ""                    # baseline: fixed pool (directory of .py or JSONL); no designer
    rlve: bool = False                # baseline: 16 RLVE environments, adaptive difficulty (rlve.py); no designer
    lr: float = 1e-6                  # AdamW learning rate (constant)
    kl_coef: float = 0.0              # k3 KL to the initial model (0.005 for tool use and Qwen3-8B)
    engine: str = "auto"              # hf | vllm | auto (vllm on CUDA when installed)
    tp: int = 0                       # vLLM's tensor-parallel size; 0 = the smallest that fits (engine.fitting_tp)
    out: str = "out/{time}"           # the run's directory; {time} is its start, YYYYmmdd-HHMMSS
    save_every: int = 16              # checkpoint every N steps (and at the end)
    resume: str = ""                  # a run directory to continue (its saved config; more --steps extend it)
    seed: int = 0                     # seeds python and torch RNGs
    wandb: bool = False               # also log metrics to Weights & Biases

    def derive(self, fixed):
        """Attach the values that are not knobs (`Fixed`), then check the whole config once."""
        if self.setting not in SETTINGS:   # first: the skills and the tables depend on it
            raise SystemExit(f"spade.py: --setting must be games or tool_use, not {self.setting!r}")
        skills = self.skill_list()
        self.fixed = Fixed(**{**fixed, "skills_per_regen": min(fixed.get("skills_per_regen", 3), len(skills))})
        self.out = self.out.replace("{time}", time.strftime("%Y%m%d-%H%M%S"))
        problems = [msg for bad, msg in [
            (self.plays_per_env < 2, "--plays-per-env must be at least 2 (advantages compare plays)"),
            (min(self.num_envs, self.steps, self.regen_interval, self.save_every, self.max_turns,
                 self.max_new_tokens) < 1,
             "--num-envs, --steps, --regen-interval, --save-every, --max-turns and --max-new-tokens must be positive"),
            (self.max_context < 1024, "--max-context must be at least 1024 tokens (a prompt and a turn)"),
            (not (self.temperature > 0 and 0 < self.top_p <= 1 and self.top_k >= 0),
             "sampling needs --temperature > 0, 0 < --top-p <= 1 and --top-k >= 0 (0: off)"),
            (not (self.lr > 0 and self.kl_coef >= 0), "--lr must be positive and --kl-coef at least 0"),
            (not 0 <= self.seed < 2**63, "--seed must be in [0, 2**63)"),
            (self.plateau() is None, f"--plateau-band must be lo,hi,ramp with 0 <= lo < hi <= 1 and ramp > 0, "
                                     f"not {self.plateau_band!r}"),
            (self.engine not in ("auto", "hf", "vllm"), f"--engine must be auto, hf or vllm, not {self.engine!r}"),
            (self.tp < 0, "--tp must be 0 (the smallest that fits) or a tensor-parallel size"),
            (self.thinking not in ("on", "off"), f"--thinking must be on or off, not {self.thinking!r}"),
            (self.designer_reward not in regret.DESIGNER_REWARDS,
             f"unknown --designer-reward {self.designer_reward!r}; one of {list(regret.DESIGNER_REWARDS)}"),
            (self.corpus not in ("", "none") and not Path(self.corpus).is_file(), f"corpus file not found: {self.corpus}"),
            (bool(self.pool) and not Path(self.pool).exists(), f"pool not found: {self.pool}"),
            (self.rlve and bool(self.pool), "--rlve and --pool are two baselines: give one"),
            (self.rlve and self.setting != "games", "--rlve is a baseline of the games setting (METHOD.md 10)"),
            (self.engine == "vllm" and importlib.util.find_spec("vllm") is None,
             "--engine vllm needs vLLM (requirements-gpu.txt; `make test-vllm` builds its CPU version)"),
            (self.wandb and importlib.util.find_spec("wandb") is None,
             "--wandb needs the wandb package (pip install wandb)")]
            if bad]
        if problems:
            raise SystemExit(f"spade.py: {problems[0]}")
        if self.rlve:
            from baselines import rlve
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
        if len(set(names)) < len(names):
            raise SystemExit(f"spade.py: --skills names a skill twice: {self.skills!r}")
        return names


@dataclass(frozen=True)
class Fixed:
    """What is not a knob: the method's own numbers (METHOD.md 7.3's shared row) and the values a setting,
    a model or the embedded preset fixes. Forks change them here or in the tables below."""
    hint_plays: int = 16              # hinted plays per new environment (not trained)
    designer_attempts: int = 5        # validated tries per designer slot
    skills_per_regen: int = 3         # skills per epoch (at most those in play)
    hint_temperature: float = 0.3     # the hint writer's sampling temperature
    designer_max_tokens: int = 16384  # tokens per environment written
    hint_max_tokens: int = 4096       # tokens per hint
    corpus_max_words: int = 6000      # document truncation
    micro_token_budget: int = 16384   # tokens per micro-batch in the update


# METHOD 7.3's columns: what a setting, a model (by `table_key`), both, the fixed-RLVE baseline
# (METHOD 10) and the embedded preset change of the defaults above, knobs and fixed values alike; applied
# in this order, so the more specific wins, and the command line over all of them.
SETTINGS = {"games": {},
            "tool_use": dict(regen_interval=8, skills_per_regen=6, hint_max_tokens=2048, corpus_max_words=4000,
                             kl_coef=0.005)}
MODELS = {"qwen3-8b": dict(thinking="on", kl_coef=0.005, designer_max_tokens=20000)}
COLUMNS = {("tool_use", "qwen3-4b"): dict(steps=500, regen_interval=32, num_envs=16, plays_per_env=16, hint_plays=4,
                                          hint_max_tokens=512, designer_reward="regret_based")}
RLVE = dict(plays_per_env=16, temperature=1.0)
# The embedded default, for the small models and random-weight shapes: a real loop that finishes in
# minutes on a 2-core CPU (and tests with `tiny`).
EMBEDDED = dict(steps=4, num_envs=2, plays_per_env=2, regen_interval=2, hint_plays=2, skills_per_regen=2,
                designer_attempts=1, max_turns=3, max_context=3072, max_new_tokens=48, designer_max_tokens=256,
                hint_max_tokens=48, micro_token_budget=4096, lr=1e-5, corpus_max_words=300, save_every=2)
EMBEDDED_SKILLS = {"games": "Mathematical Reasoning,Pattern Recognition",
                   "tool_use": "Data Retrieval,State Modification"}
SMALL_MODELS = ("smollm2-135m", "tiny", "tiny-moe")
# What a resumed run may change of its saved config.
RESUMABLE = ("resume", "steps", "save_every", "engine", "tp", "wandb")


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
    return resumed_config(given) if given.get("resume") else configure(given)


def configure(given):
    """The Config of these given knobs: the tables that apply to their setting and model over the
    defaults, the given values over the tables; the tables' other values become `cfg.fixed`."""
    setting, name = given.get("setting", Config.setting), given.get("model", Config.model).lower()
    small, model = name in SMALL_MODELS or (name.startswith("random-") and "/" not in name), table_key(name)
    values = {**SETTINGS.get(setting, {}), **MODELS.get(model, {}), **COLUMNS.get((setting, model), {}),
              **(RLVE if given.get("rlve") else {}),
              **({**EMBEDDED, "skills": EMBEDDED_SKILLS.get(setting, "")} if small else {}), **given}
    knobs = {f.name for f in dataclasses.fields(Config)}
    return Config(**{k: v for k, v in values.items() if k in knobs}).derive(
        {k: v for k, v in values.items() if k not in knobs})


def table_key(model):
    """The MODELS and COLUMNS key of a --model, so its alias, the hub id it stands for and a directory
    named after either find the same row: the last path part, lower case, without an -Instruct[-date].

    >>> [table_key(m) for m in ("Qwen3-8B", "Qwen/Qwen3-4B-Instruct-2507", "/ckpt/Qwen3-8B/", "random-qwen3-8b:4")]
    ['qwen3-8b', 'qwen3-4b', 'qwen3-8b', 'random-qwen3-8b:4']
    """
    return re.sub(r"-instruct(-\d+)?$", "", model.rstrip("/").rsplit("/", 1)[-1].lower())


def resumed_config(given):
    """--resume: the run's saved config, with what RESUMABLE lets a command line change (more --steps extend
    it; --wandb holds for this invocation only). Any other flag that changes the config is refused in one
    sentence, as is a saved config of another version's knobs."""
    latest, pointer = Path(given["resume"]) / "latest", read_pointer(given["resume"])
    if pointer["config"].pop("no_corpus", False):   # an earlier version's spelling of --corpus none
        pointer["config"]["corpus"] = "none"
    knobs = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(pointer["config"]) - knobs)
    if unknown:
        raise SystemExit(f"spade.py: {latest} was written by another version of spade.py (its knobs {unknown})")
    saved = configure({**pointer["config"], "wandb": False})
    wanted = configure({**pointer["config"], "wandb": False, **given})
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
        from infra import report
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
    run = set_up(cfg)
    for step in range(run.state["step"], cfg.steps):
        if not self_play_step(run, step):
            return
    if run.rank == 0:
        from infra import report
        report.main([str(run.dir)])


def self_play_step(run, step):
    """One step in the paper's order (METHOD.md 0). False when Ctrl-C stopped the run after it."""
    import grpo
    cfg, state = run.cfg, run.state
    times, metrics, start = {}, {"step": step}, time.perf_counter()
    # 1. This step's plays: at a regen step the designer first writes a new pool (and its hinted plays);
    #    a baseline takes its fixed pool's next environments, or new RLVE problems (run.plays, the seam).
    played, regen, finished = run.plays(run, step, times, metrics)
    # 2. FAILED plays (hangs, crashes, load or tool failures) are dropped and a game that hung is never
    #    played again (METHOD 3.3); the advantages are z-scored per environment; the open epoch records
    #    this step's rewards of its environments.
    episodes, hung = drop_failed(played, state["blacklist"])
    log_blacklisted(run, hung)
    rewards = group_rewards(episodes)
    agent_samples = trained_agent_samples(episodes, compact_filter=cfg.setting == "tool_use")
    metrics.update(agent_metrics(played, episodes, rewards))
    metrics["agent/samples"] = len(agent_samples)
    if state["epoch"] is not None:
        state["epoch"].record(rewards, hung)
    # 3. Memory records each new environment with its win rate and regret at the regen step.
    if regen is not None:
        metrics.update(remember_new_envs(run, regen, rewards, played, step))
    if step % cfg.regen_interval == 0:   # what the agent played, for people: every environment of the pool
        run.log.plays(step, played, {env_id: regret.win_rate(rs) for env_id, rs in rewards.items()})
    # 4. The delayed designer rewards (D = R): the epoch that ended at this regen step, and on the last
    #    step the open epoch with whatever plays it has (METHOD 6.2 step 5). The role scale counts this
    #    step's agent episodes, compact-filtered ones too, a thinking episode once (METHOD 6.2 step 4).
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
        run.gen.sleep()
        update = grpo.update(run.model, run.optimizer, batch, micro_token_budget=cfg.fixed.micro_token_budget,
                             temperature=cfg.temperature,
                             activation_checkpointing=run.device == "cuda",   # activations, not weights, fill a GPU
                             kl_coef=cfg.kl_coef, ref_model=run.ref_model) if batch else {}
        grpo.push_weights(run.model, run.gen)
    # 6. Log one line; save a checkpoint every N steps, at the end, and on Ctrl-C.
    state["step"] = step + 1
    metrics["seconds"] = time.perf_counter() - start
    metrics.update({f"grpo/{k}": v for k, v in update.items() if isinstance(v, (int, float))})
    metrics["tokens_per_s"] = sum(e.num_generated_tokens for e in played) / max(1e-9, times.get("play", 0.0))
    metrics.update({f"time/{k}": v for k, v in times.items()})
    run.log.step(metrics)
    stopping = agreed(run.stop, run.world)               # every rank stops after the same step
    if state["step"] % cfg.save_every == 0 or state["step"] == cfg.steps or stopping:
        save_checkpoint(run.dir, cfg, run.model, run.tokenizer, run.optimizer, run.memory, state, run.rank)
    if stopping:
        run.log.print(f"interrupted: saved step {state['step']}; continue with --resume {run.dir}")
    return not stopping


# --- where a step's plays come from: the seam between self-play and the two baselines ---------------
def self_play_plays(run, step, times, metrics):
    """Self-play: a regen step's new pool from the designer (regen_pool), then K plays of each pool
    environment. Returns (plays, the regen step's new pool or None, epochs now finished)."""
    regen, finished = None, []
    if step % run.cfg.regen_interval == 0:
        finished.append(run.state["epoch"])              # the previous epoch: all its plays are known
        regen = regen_pool(run, step, times, metrics)
    return play_pool(run, run.state["pool"], step, times), regen, finished


def fixed_pool_plays(run, step, times, metrics):
    """Baseline: the fixed pool's next environments (METHOD 10), without a designer."""
    run.state["pool"] = next_from_pool(run.fixed_pool, run.state, run.cfg.num_envs)
    return play_pool(run, run.state["pool"], step, times), None, []


def rlve_plays(run, step, times, metrics):
    """Baseline: a new RLVE problem per environment, at its adaptive difficulty (rlve.py)."""
    from baselines import rlve
    cfg, state = run.cfg, run.state
    names = next_from_pool(rlve.ENVIRONMENTS, state, cfg.num_envs)
    with timer(times, "play"):
        played = rlve.play_round(state["rlve"], names, state["rng"], run.gen, run.tokenizer, cfg.plays_per_env,
                                 lambda sizes, work: divided(run, sizes, work), params=run.params["agent"],
                                 max_context=cfg.max_context, max_new_tokens=cfg.max_new_tokens,
                                 thinking=cfg.thinking == "on")
    metrics.update(state["rlve"].metrics())
    return played, None, []


@dataclass
class Regen:
    """A regen step's new pool, for memory and the samples dump: its environments, their hints, the
    hinted plays and the designer's rejected attempts."""
    envs: list
    hints: list
    hinted: list
    rejected: list


def regen_pool(run, step, times, metrics):
    """The designer writes a new pool (validated in the sandbox), then a hint per environment, then the
    agent plays each new environment with its hint: R_hint (never trained on). A new epoch opens. The
    ranks divide the slots, the hints and the hinted plays where the engine lets them (divided)."""
    import designer
    cfg, state = run.cfg, run.state
    with timer(times, "design"):
        slots = designer.slots_for_epoch(run.skills, step // cfg.regen_interval, cfg.fixed.skills_per_regen,
                                         cfg.num_envs)
        parts = divided(run, [1.0] * len(slots), lambda mine: [designer.design(
            run.gen, run.tokenizer, slots, corpus=run.corpus, memory=run.memory, setting=cfg.setting,
            params=run.params["designer"], max_attempts=cfg.fixed.designer_attempts, seed=cfg.seed,
            rollout_id=step, audit_params=run.params["audit"], only=mine, echo=False)], per_rank=True)
        new_envs = sorted((e for envs, _, _ in parts for e in envs), key=lambda e: e.env_id)   # by slot
        samples = sorted((s for _, samples, _ in parts for s in samples), key=lambda s: s.env_id)
        failures = sorted((f for _, _, stats in parts for f in stats["failures"]), key=lambda f: (f["attempt"], f["slot"]))
        attempts = sum(stats["num_attempts"] for _, _, stats in parts)
        metrics.update({"designer/valid_rate": len(new_envs) / len(slots), "designer/attempts": attempts})
        stages = dict(Counter(f["stage"] for f in failures))
        for failure in failures:   # every rank's, in order (each rank wrote its own share)
            run.log.print(designer.rejection_line(failure, cfg.fixed.designer_attempts))
        run.log.print(f"designer: {len(new_envs)}/{len(slots)} environments valid after {attempts} attempts; "
                      f"rejections by stage: {stages or 'none'}")
    with timer(times, "hints"):
        hints = divided(run, [1.0] * len(new_envs), lambda mine: designer.write_hints(
            run.gen, run.tokenizer, [new_envs[i] for i in mine], cfg.setting, run.params["hint"])) \
            if cfg.designer_reward in regret.NEEDS_HINTS and new_envs else []
        # The same seeds as this step's unhinted plays: both arms of the regret meet the same instances.
        hinted = play_shared(run, new_envs, cfg.fixed.hint_plays, step, hints) if hints else []
        scored_hinted, hung = drop_failed(hinted, state["blacklist"])
        log_blacklisted(run, hung)
    topup = state["rng"].sample(run.seeds, min(len(run.seeds), max(0, cfg.num_envs - len(new_envs))))
    if topup:
        run.log.print(f"designer: {len(new_envs)}/{cfg.num_envs} valid; topping up the pool with "
                      f"{len(topup)} seed environments from envs/ (not rewarded to the designer)")
    state["pool"] = new_envs + topup
    state["lengths"] = {e.env_id: state["lengths"][e.env_id] for e in state["pool"] if e.env_id in state["lengths"]}
    state["epoch"] = regret.Epoch(step, samples, group_rewards(scored_hinted), timeouts=hung)
    return Regen(new_envs, hints, hinted, failures)


def play_pool(run, pool, step, times):
    """K trained plays of each environment not blacklisted, seeded per play and salted by step (the
    regen step's hinted plays used the same seeds, METHOD 13.3)."""
    pool = [e for e in pool if e.env_id not in run.state["blacklist"]]
    with timer(times, "play"):
        return play_shared(run, pool, run.cfg.plays_per_env, step)


def play_shared(run, envs, plays, step, hints=None):
    """`plays` plays of each environment (with its hint), seeded per play and salted by step; the
    ranks divide the (environment, play) pairs, balanced by each environment's mean length when it
    was last played. Every rank returns them all, environment-major."""
    import agent
    pairs = [(i, seed) for i, env in enumerate(envs) for seed in agent.play_seeds(env.env_id, plays, step)]
    lengths = run.state["lengths"]   # env_id -> mean generated tokens of a play (of the pool's)
    played = divided(run, [lengths.get(envs[i].env_id, 1.0) for i, _ in pairs], lambda mine: agent.play(
        [envs[pairs[k][0]] for k in mine], run.gen, run.tokenizer, 1, [hints[pairs[k][0]] for k in mine]
        if hints else None, params=run.params["agent"], seeds=[[pairs[k][1]] for k in mine],
        progress=("hinted plays" if hints else "plays") if run.rank == 0 else None, **play_limits(run.cfg)))
    for env in envs:
        tokens = [e.num_generated_tokens for e in played if e.env_id == env.env_id]
        lengths[env.env_id] = sum(tokens) / len(tokens) if tokens else 1.0
    return played


def divided(run, sizes, work, per_rank=False):
    """`work(indices)` on this rank's share of len(sizes) items (launch.share), every rank's results
    gathered in order; in one piece where the engine cannot generate on its own (launch.py).
    `per_rank`: work returns one result for its whole share, and the list of the ranks' comes back."""
    with run.gen.independent() as alone:
        world = run.world if alone else 1
        if world > 1:
            # A random stream of its own; vLLM's tensor-parallel groups (launch.TensorParallelGroup) one a group.
            reseed(world, stream=run.rank // getattr(run.gen, "tp", 1))
        mine = share(sizes, run.rank, world) if world > 1 else list(range(len(sizes)))
        results = work(mine)
    if world > 1:
        reseed(world)
    if per_rank:
        return gather(results, [run.rank if world > 1 else 0], world, world)
    return gather(results, mine, len(sizes), world)


# --- set-up: the run's directory, sandbox, corpus or pool, model, engine, optimizer, memory and state -------
@dataclass
class Run:
    """What the loop works with, set up once (`set_up`). `state` is what checkpoints keep."""
    cfg: Config
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
    plays: object      # where a step's plays come from: self_play_plays, fixed_pool_plays or rlve_plays
    stop: object       # set by Ctrl-C (launch.install_sigint_handler)


def set_up(cfg):
    import torch
    import designer, sandbox
    from baselines import rlve
    from infra import report
    from designer import builtin_corpus, load_corpus
    from envs import load_pool
    rank, world = setup_distributed()
    cfg.out = from_rank_0(cfg.out, world)   # one start time in out/{time}: rank 0's
    run_dir = Path(cfg.resume or cfg.out)
    if rank == 0:
        claim(run_dir, resuming=bool(cfg.resume))
    pointer = read_pointer(run_dir) if cfg.resume else None
    checkpoint = run_dir / pointer["checkpoint"] if pointer else None
    log = report.Log(run_dir, cfg, rank)
    random.seed(cfg.seed), torch.manual_seed(cfg.seed)
    # The sandbox every environment runs in: started first, so a machine that cannot isolate model-written
    # code stops here, in one sentence (RLVE's environments are a package's, not a model's).
    # What the environments grow from, the corpus or a baseline's fixed pool, is read before the model
    # loads: a bad file is then an error in seconds, not after minutes.
    try:
        if not cfg.rlve:
            log.print("sandbox: " + sandbox.summary())
        fixed_pool = load_pool(cfg.pool) if cfg.pool else None
        words = cfg.fixed.corpus_max_words
        corpus = None if cfg.corpus == "none" or cfg.pool or cfg.rlve else (
            load_corpus(cfg.corpus, words) if cfg.corpus else builtin_corpus(words))
    except (OSError, ValueError, RuntimeError) as e:   # no isolation; a missing or empty corpus; a broken pool
        raise SystemExit(f"spade.py: {e}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer, gen, ref_model, optimizer, params = load_trainer(cfg, checkpoint, device, world,
                                                                       step=pointer["step"] if pointer else 0)
    skills = cfg.skill_list()
    seeds = [e for e in load_pool(ROOT / "envs", validate=False) if e.skill in skills]
    memory = None if cfg.no_memory or cfg.pool or cfg.rlve else designer.EnvMemory(run_dir / "env_memory.json")
    # pool_rng: the fixed pool's own shuffle, seed 42 as the paper's baseline (METHOD 10).
    state = dict(step=0, pool=[], epoch=None, tracker=regret.LearningPotentialTracker(), order=[],
                 rng=random.Random(cfg.seed), pool_rng=random.Random(42), blacklist=set(), lengths={},
                 rlve=rlve.Curriculum() if cfg.rlve else None)
    if checkpoint:
        state = restore(checkpoint, optimizer, memory, rank)
        log.rewind(state["step"])
        log.print(f"resumed {run_dir} at step {state['step']} from {checkpoint.name}")
        if state["step"] == pointer["config"]["steps"] and not (cfg.pool or cfg.rlve):
            log.print("extending a finished run: its last step scored the open epoch early (METHOD.md 6.2), "
                      "so it trains no designer samples until its next regen step")
    elif memory is not None and not memory.records:
        memory.seed_from(seeds)
    log.config()
    plays = rlve_plays if cfg.rlve else fixed_pool_plays if fixed_pool is not None else self_play_plays
    return Run(cfg, run_dir, log, rank, world, device, corpus, fixed_pool, model, tokenizer, gen, ref_model,
               optimizer, params, skills, seeds, memory, state, plays, install_sigint_handler())


def load_trainer(cfg, checkpoint, device, world, step=0):
    """The model, its two views (trainer + engine), the KL reference, the optimizer, the sampling params;
    `step`: the checkpoint's."""
    import grpo
    from infra import engine, models
    load = models.load_sharded if world > 1 else models.load_model   # several ranks: FSDP2 shards
    from safetensors import SafetensorError   # a truncated weights file
    problems = (OSError, ValueError, models.ModelLoadError, SafetensorError)   # one sentence each, no trace
    try:
        model, tokenizer = load(str(checkpoint / "model") if checkpoint else cfg.model)
    except problems as e:
        raise damaged(checkpoint, e) if checkpoint else SystemExit(f"spade.py: {e}") from None
    try:
        ref_model = kl_reference(cfg, model, resumed=checkpoint is not None, sharded=world > 1)
    except problems as e:
        raise SystemExit(f"spade.py: {e}") from None
    vllm_here = device == "cuda" and importlib.util.find_spec("vllm") is not None
    kind = cfg.engine if cfg.engine != "auto" else ("vllm" if vllm_here else "hf")
    tp = engine_tp(cfg, kind, model, world)
    # vLLM's sampling stream, which no checkpoint holds: one per --seed, and another after each resume
    seed = (cfg.seed + step) % 2**31   # numpy's range
    gen = engine.make_engine(model, tokenizer, kind, **({"tp": tp, "seed": seed} if kind == "vllm" else {}))
    gen = TensorParallelGroup(gen, tp, world) if kind == "vllm" and world > 1 else gen
    gen = RankAgreement(gen) if world > 1 else gen           # in lockstep, ranks must ask for the same prompts
    agent_params = engine.SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens)
    params = dict(agent=agent_params,
                  designer=dataclasses.replace(agent_params, max_new_tokens=cfg.fixed.designer_max_tokens),
                  hint=engine.SamplingParams(cfg.fixed.hint_temperature, top_p=0.9, top_k=0,
                                             max_new_tokens=cfg.fixed.hint_max_tokens),
                  # Tool use: the policy's solvability audit of each environment that passed the gate (3.1 step 4).
                  audit=engine.SamplingParams(0.3, top_p=0.9, top_k=0,
                                              max_new_tokens=min(16384, cfg.fixed.designer_max_tokens))
                  if cfg.setting == "tool_use" else None)
    return model, tokenizer, gen, ref_model, grpo.make_optimizer(model, lr=cfg.lr), params


def engine_tp(cfg, kind, model, world):
    """vLLM's tensor-parallel size: --tp, or the smallest that fits this GPU (engine.fitting_tp). The
    in-process engine is one rank a group."""
    import torch
    from infra import engine
    if kind != "vllm" or world == 1:
        if cfg.tp > 1:
            raise SystemExit(f"spade.py: --tp {cfg.tp} needs --engine vllm and as many ranks (GPUs)")
        return 1
    tp = cfg.tp or engine.fitting_tp(sum(p.numel() * p.element_size() for p in model.parameters()),
                                     torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available()
                                     else float("inf"), world)
    if world % tp:
        raise SystemExit(f"spade.py: --tp {tp} does not divide the {world} ranks into tensor-parallel groups")
    return tp


# --- the phases' small helpers -------------------------------------------------------------------
def play_limits(cfg):
    """The per-play settings of both arms (hinted and trained plays think alike: agent.py)."""
    return dict(max_turns=cfg.max_turns, max_context=cfg.max_context, max_new_tokens=cfg.max_new_tokens,
                thinking=cfg.thinking == "on")


def remember_new_envs(run, regen, rewards, episodes, step):
    """Memory records each new environment with its win rate and raw regret at the regen step
    (METHOD 8); the step's samples are dumped for people. Returns the designer's regret and length metrics."""
    scores, hinted = {}, run.state["epoch"].hinted
    for env in regen.envs:
        step0 = rewards.get(env.env_id, [])
        raw = regret.EnvOutcome(env.skill, [step0], hinted.get(env.env_id, [])).regret
        scores[env.env_id] = dict(win_rate=regret.win_rate(step0), regret=raw)
        if run.memory is not None:
            run.memory.add(env.env_id, env.skill, env.code, scores[env.env_id]["win_rate"], raw, step)
    if run.memory is not None:
        run.memory.save()
    run.log.samples(step, regen, episodes, scores)
    if not regen.envs:
        return {}
    return {"designer/regret": sum(v["regret"] for v in scores.values()) / len(scores),
            "designer/env_lines": sum(len(e.code.splitlines()) for e in regen.envs) / len(regen.envs)}


def log_blacklisted(run, hung):
    if hung:
        run.log.print(f"blacklisted (hung in load, reset or step; not played again): {', '.join(sorted(hung))}")


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
