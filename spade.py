"""SPADE self-play: one model designs environments (as Python) and learns by playing them.

    python spade.py                                   # the embedded default: SmolLM2-135M on CPU, offline
    python spade.py --model Qwen3-4B                  # one GPU, the paper's settings (METHOD.md 7.3)
    python spade.py --model Qwen3-30B-A3B             # one node: a rank per GPU (backend/launch.py), FSDP2
    python spade.py --pool envs/                      # baseline: fixed-pool GRPO, no designer
    python spade.py --rlve --model Qwen3-4B           # baseline: RLVE's environments (baselines/rlve.py)
    python spade.py --resume out/<run>                # carry on from the last checkpoint
    python spade.py report out/<run>                  # plots + an HTML page of the curriculum
    python spade.py config --model Qwen3-8B           # every value such a run uses, and the layer that set it
    python spade.py plan --model Qwen3-8B --gpus 8    # its memory plan on 8 GPUs, before renting them

Top to bottom: the thirty knobs (`Config`), the values that have no flag (`Unflagged`), the settings and
METHOD.md 7.3's per-run tables (data, which harness/cli.py's `layers` applies in order), then the loop
(`train`) in the paper's order (METHOD.md 0). The set-up is harness/setup.py; dividing a phase's work between ranks is
backend/launch.py's `divide`. Not here: a batch trimmed to a fixed size, retries of FAILED plays.
spade.py starts the ranks of one node itself; several nodes start under torchrun (README, Beyond one node).
"""
import contextlib
import importlib.util
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

try:   # no torch below this line's imports: a bad flag is one sentence in a second
    import agent
    import designer
    import prompts
    import regret
    from designer import Setting
    from envs import GAME_SKILLS, TOOL_SKILLS
    from backend import launch
    from harness import cli, plan, report
    from harness.checkpoint import save_checkpoint
except ModuleNotFoundError as e:   # a Python without the packages: the venv that `make` builds has them
    raise SystemExit(f"spade.py: {e}; run it with .venv/bin/python (`make` builds it) or pip install -r "
                     f"requirements.txt") from None


@dataclass
class Config:
    """The thirty knobs, in the README's groups. Each default is the paper's (METHOD.md 7.3: games,
    Qwen3-30B-A3B) but the model's, which is the one that runs offline on a CPU; `cli.configure` lays the
    tables below over them, and what the command line gives over all of them."""
    # model and length
    model: str = "smollm2-135m"       # alias (Qwen3-30B-A3B, Qwen3-8B, Qwen3-4B, smollm2-135m, tiny) or path
    setting: str = "games"            # a record of SETTINGS: skills, prompts and its column of METHOD 7.3
    steps: int = 400                  # rollout steps (= policy updates)
    # self-play (METHOD.md 6)
    num_envs: int = 24                # G: environments per pool
    plays_per_env: int = 8            # K: trained plays of each environment per step
    regen_interval: int = 4           # R: steps per pool (8 for tool use)
    skills: str = ""                  # comma-separated skill names; "" = all six of the setting
    designer_reward: str = "blend"    # the designer's reward, a function of regret.DESIGNER_REWARDS (METHOD 6.3)
    plateau_band: str = "0.4,0.6,0.25"  # lo,hi,ramp of the win-rate plateau (4B later phase: 0.2,0.4,0.2)
    # rollouts (METHOD.md 4)
    temperature: float = 0.6          # agent and designer sampling temperature (the update's: Unflagged)
    top_p: float = 0.95               # nucleus sampling of agent and designer
    top_k: int = 20                   # top-k sampling of agent and designer (0: off)
    max_turns: int = 25               # agent turns per episode, the cap on a game's own (gate, plays; no-corpus prompt)
    max_context: int = 32768          # tokens per episode
    max_new_tokens: int = 8192        # agent tokens per turn
    thinking: str = "off"             # agent thinking, a sample per turn (METHOD 4.2; on for Qwen3-8B)
    # baselines and ablations (METHOD.md 10)
    corpus: str = ""                  # JSONL with orig_doc/text; "" = built from the stdlib's docs; none = ablation
    no_memory: bool = False           # ablation: no environment memory
    no_designer_training: bool = False  # ablation: designer samples are generated but not trained
    pool: str = ""                    # baseline: fixed pool (directory of .py or JSONL); no designer
    rlve: bool = False                # baseline: 16 RLVE environments, adaptive difficulty (baselines/rlve.py); no designer
    # the update (METHOD.md 7)
    lr: float = 1e-6                  # AdamW learning rate (constant; 0: a control that never learns)
    kl_coef: float = 0.0              # k3 KL to the initial model (0.005 for tool use and Qwen3-8B)
    # engines and GPUs
    engine: str = "auto"              # in-process transformers or vLLM (auto: vllm on CUDA when installed)
    tp: int = 0                       # vLLM's tensor-parallel size; 0 = the memory plan's (harness/plan.py)
    # the run's directory
    out: str = "out/{time}"           # the run's directory; {time} is its start, YYYYmmdd-HHMMSS
    save_every: int = 16              # checkpoint every N steps and at the end (0: none; >= --steps: the end's)
    resume: str = ""                  # a run directory to continue (its saved config; more --steps extend it)
    seed: int = 0                     # seeds python and torch RNGs and the games' instances
    wandb: bool = False               # also log metrics to Weights & Biases

    def derive(self, unflagged):
        """Attach the values that have no flag (`Unflagged`), then check the whole config once."""
        wrong = [f"{cli.flag(k)} must be one of {', '.join(names)}, not {getattr(self, k)!r}"
                 for k, names in choices().items() if getattr(self, k) not in names]
        if wrong:   # first: the setting's skills and tables depend on it
            raise SystemExit(f"spade.py: {wrong[0]}")
        skills_per_regen = min(unflagged["skills_per_regen"], len(self.skill_list()))   # at most those in play
        self.unflagged = Unflagged(**{**unflagged, "skills_per_regen": skills_per_regen})
        self.out = self.out.replace("{time}", time.strftime("%Y%m%d-%H%M%S"))
        problems = [msg for bad, msg in [
            (self.plays_per_env < 2, "--plays-per-env must be at least 2 (advantages compare plays)"),
            *[(getattr(self, k) < 1, f"{cli.flag(k)} must be positive")
              for k in ("num_envs", "steps", "regen_interval", "max_turns", "max_new_tokens")],
            (self.save_every < 0, "--save-every must be 0 (no checkpoint) or positive"),
            (not self.out, "--out must name the run's directory (\"\" would be the working one)"),
            (self.max_context < 1024, "--max-context must be at least 1024 tokens (a prompt and a turn)"),
            (not (0 < self.temperature < float("inf") and 0 < self.top_p <= 1 and self.top_k >= 0),
             "sampling needs a finite --temperature > 0, 0 < --top-p <= 1 and --top-k >= 0 (0: off)"),
            (not (0 <= self.lr < float("inf") and 0 <= self.kl_coef < float("inf")),
             "--lr and --kl-coef must be at least 0 and finite (--lr 0: a control)"),
            (not 0 <= self.seed < 2**63, "--seed must be in [0, 2**63)"),
            (self.plateau() is None, f"--plateau-band must be lo,hi,ramp with 0 <= lo < hi <= 1 and ramp > 0, "
                                     f"not {self.plateau_band!r}"),
            (self.tp < 0, "--tp must be 0 (the memory plan's choice) or a tensor-parallel size"),
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
        """--plateau-band as regret.score_designer_batch's keywords {lo, hi, ramp}; None when malformed."""
        try:
            lo, hi, ramp = (float(x) for x in self.plateau_band.split(","))
        except ValueError:
            return None
        return dict(lo=lo, hi=hi, ramp=ramp) if 0 <= lo < hi <= 1 and ramp > 0 else None

    def skill_list(self):
        known = SETTINGS[self.setting].skills
        names = [s.strip() for s in self.skills.split(",") if s.strip()] or list(known)
        unknown = [s for s in names if s not in known]
        if unknown:
            raise SystemExit(f"spade.py: unknown {self.setting} skill(s) {unknown}; known: {list(known)}")
        if len(set(names)) < len(names):
            raise SystemExit(f"spade.py: --skills names a skill twice: {self.skills!r}")
        return names


@dataclass(frozen=True)
class Unflagged:
    """The values that have no flag: the method's own numbers (METHOD.md 7.3's shared row), which the
    tables below override as they do the knobs' defaults. Forks change them here or in the tables."""
    hint_plays: int = 16              # hinted plays per new environment (not trained)
    designer_attempts: int = 5        # validated tries per designer slot
    skills_per_regen: int = 3         # skills per epoch (at most those in play)
    hint_temperature: float = 0.3     # the hint writer's sampling temperature
    train_temperature: float = 1.0    # the update's log-probs divide the logits by it (Slime's --rollout-temperature)
    designer_max_tokens: int = 16384  # tokens per environment written
    hint_max_tokens: int = 4096       # tokens per hint
    corpus_max_words: int = 6000      # document truncation
    micro_token_budget: int = 16384   # tokens per micro-batch in the update
    seed_pool: str = ""               # the seed environments' pool ("": the setting's `seeds`)


# The two settings of the paper, one record each (designer.Setting): skills, prompts, hint writer, the
# audit and the compact filter, and their column of METHOD 7.3. A fork adds a third here.
SETTINGS = {
    "games": Setting(GAME_SKILLS, designer.game_messages, prompts.HINT_GAME_SYSTEM,
                     embedded_skills="Mathematical Reasoning,Pattern Recognition", embedded_seeds="envs/easy/"),
    "tool_use": Setting(TOOL_SKILLS, designer.tool_messages, prompts.HINT_TOOL_SYSTEM, audit=True, compact_filter=True,
                        values=dict(regen_interval=8, skills_per_regen=6, hint_max_tokens=2048, corpus_max_words=4000,
                                    kl_coef=0.005),
                        embedded_skills="Data Retrieval,State Modification"),
}
# METHOD 7.3's other columns: what a model (by `cli.table_key`), a setting and a model together, the
# fixed-RLVE baseline (METHOD 10) and the embedded preset change of the defaults above, knobs and
# unflagged values alike; `cli.layers` applies them after the setting's, in this order, so the more
# specific wins, and the command line over all of them.
MODELS = {"qwen3-8b": dict(thinking="on", kl_coef=0.005, designer_max_tokens=20000)}
COLUMNS = {("tool_use", "qwen3-4b"): dict(steps=500, regen_interval=32, num_envs=16, plays_per_env=16, hint_plays=4,
                                          hint_max_tokens=512, designer_reward="regret_based", train_temperature=0.7)}
RLVE = dict(plays_per_env=16, temperature=1.0)
# The embedded default, for the small models and random-weight shapes: a real loop that finishes in
# minutes on a 2-core CPU (and tests with `tiny`), two skills of the setting.
EMBEDDED = dict(steps=12, num_envs=4, plays_per_env=16, regen_interval=4, hint_plays=2, skills_per_regen=2,
                designer_attempts=1, max_turns=3, max_context=3072, max_new_tokens=32, designer_max_tokens=256,
                hint_max_tokens=48, micro_token_budget=4096, lr=5e-5, corpus_max_words=300)
SMALL_MODELS = ("smollm2-135m", "tiny", "tiny-moe")
# What a resumed run may change of its saved config.
RESUMABLE = ("resume", "steps", "save_every", "engine", "tp", "wandb")


def parse_config(argv):
    """The Config of a command line: its flags and --help (harness/cli.py), the layers merged, or
    --resume's saved config with what a command line may change."""
    return cli.parse_config(sys.modules[__name__], argv)


def configure(given, saved=None):
    """The Config of these given knobs (and a resumed run's saved ones): cli.configure of this program."""
    return cli.configure(sys.modules[__name__], given, saved)


def choices():
    """The knobs that take one of a few names, and those names (a fork's new setting or reward included)."""
    return dict(setting=list(SETTINGS), designer_reward=list(regret.DESIGNER_REWARDS), thinking=["on", "off"],
                engine=["auto", "hf", "vllm"])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        return report.main(argv[1:])
    if argv[:1] == ["plan"]:     # what such a run chooses on such GPUs, without them (harness/plan.py)
        return print(plan.main(argv[1:], parse_config, SETTINGS))
    if argv[:1] == ["config"]:   # the header such a run prints: every value under the layer that set it
        return print("\n".join(report.config_lines(parse_config(argv[1:]))))
    cfg = parse_config(argv)
    status = launch.as_ranks(argv, __file__)   # several GPUs: this process starts one rank per GPU
    if status is not None:
        sys.exit(status)
    from harness.setup import set_up
    run = set_up(cfg, SETTINGS[cfg.setting])
    if train(run) and run.rank == 0:
        report.main([str(run.dir)])
    if run.world > 1:
        launch.end_rank()   # not the interpreter's exit, beside torch.distributed's threads


def train(run):
    """The self-play loop, one policy update a step, in the paper's order (METHOD.md 0). False when a
    Ctrl-C stopped it after a step (its checkpoint saved).

    `run` comes from harness/setup.py's `set_up`: the model, its engine `run.gen` (asleep until a step's
    push), `run.params` (sampling), the KL reference, the optimizer, the corpus, the memory and `run.state`,
    what a checkpoint keeps: the step, the pool (empty until the first regen step), the open epoch (None
    until step 0's `new_pool`), the blacklist, the RNGs and the learning-potential tracker.
    """
    import grpo
    cfg, state = run.cfg, run.state
    for step in range(state["step"], cfg.steps):
        times, metrics, start = {}, {"step": step}, time.perf_counter()
        # 0. The weight push wakes the engine, asleep through the update and checkpoint (harness/plan.py);
        #    an engine that does not hold the trainer's weights stops the run here (harness/sync.py).
        metrics.update(push(run, step, times))
        # 1. Design -> validate -> hints -> hinted plays, every R steps: the designer writes G environments
        #    from a corpus document and memory, the gate admits them, the policy writes a hint for each and
        #    plays it with the hint (R_hint, never trained). The epoch of the previous pool is now complete.
        finished, regen = [], None
        if step % cfg.regen_interval == 0 and not (cfg.pool or cfg.rlve):
            regen = new_pool(run, step, times, metrics)
            finished, state["epoch"] = [state["epoch"]], regen.epoch   # the hand-over: regret.Epoch's timeline
        # 2. Plays: K trained plays of each pool environment. FAILED plays (hangs, crashes, load or tool
        #    failures) are dropped, and a game that hung is never played again (METHOD 3.3).
        played = trained_plays(run, step, times, metrics)
        episodes, hung = agent.drop_failed(played, state["blacklist"])
        log_blacklisted(run, hung)
        # 3. Advantages per role. The agent's: z-scores within each environment (METHOD 6.1). The open
        #    epoch records this step's plays of its environments for the designer's delayed reward.
        agent_samples = grpo.agent_samples(episodes, regret.episode_advantages(episodes), run.setting.compact_filter)
        if state["epoch"] is not None:
            state["epoch"].record([e.outcome() for e in episodes], hung)
        # 4. Regret and the delayed designer scoring (D = R): the epoch handed over at this regen step, and
        #    on the last step the open one with the plays it has (METHOD 6.2 step 5; regret.Epoch).
        if step == cfg.steps - 1:
            finished, state["epoch"] = finished + [state["epoch"]], None
        designer_batch = score_designer(run, finished, episodes)
        # 5. One PPO-clip + TIS update on designer and agent samples together, the engine asleep.
        trained = [] if cfg.no_designer_training else [sample for sample, _ in designer_batch]
        update = update_policy(run, trained + agent_samples, times)
        # 6. Memory records each new environment with its win rate and regret at its regen step (METHOD 8).
        if regen is not None:
            metrics.update(remember(run, regen, played, step))
        # 7. Log one line; a checkpoint every N steps, at the end, and on Ctrl-C, the engine still asleep.
        metrics.update(step_metrics(played, episodes, agent_samples, designer_batch, update, times, start))
        if not log_and_save(run, step, played, episodes, metrics):
            return False
    return True


# --- 0. the push; 1. a new pool: design, validate, hints, hinted plays --------------------------------
def push(run, step, times):
    """The last update's weights into the engine, which wakes; then the engine and the trainer score a
    fixed probe: sync/logprob_gap, and a run whose engine disagrees stops before it plays or trains."""
    from backend import engine
    from harness import sync
    with timer(times, "push"):
        engine.push_weights(run.model, run.gen)
    with timer(times, "probe"):
        return sync.check(run, step)


@dataclass
class Regen:
    """A regen step's new pool, for memory and the samples dump: its environments, their hints, the
    hinted plays and the designer's rejected attempts."""
    envs: list
    hints: list
    hinted: list
    rejected: list
    epoch: object          # regret.Epoch: the epoch that opens on these environments


def new_pool(run, step, times, metrics):
    """The designer writes G environments (each validated by the gate), then a hint for each, then the
    agent plays each new environment with its hint: R_hint. The pool is topped up from the seed
    environments where fewer than G are valid; the new epoch (Regen.epoch) holds the designer samples."""
    cfg, state = run.cfg, run.state
    with timer(times, "design"):
        envs, samples, rejected = design(run, step, metrics)
    with timer(times, "hints"):
        hints = launch.divide(run, [1.0] * len(envs), lambda mine: designer.write_hints(
            run.gen, run.tokenizer, [envs[i] for i in mine], run.setting, run.params["hint"])) \
            if regret.needs_hints(cfg.designer_reward) and envs else []
        # Seeded as this step's unhinted plays (agent.play_seeds): with 16 hinted plays and 8 unhinted, the
        # first 8 hinted plays meet the same instances as the unhinted ones; the other 8 are new.
        hinted = play_on_ranks(run, envs, cfg.unflagged.hint_plays, step, hints) if hints else []
        scored_hinted, hung = agent.drop_failed(hinted, state["blacklist"])
        log_blacklisted(run, hung)
    topup = state["rng"].sample(run.seeds, min(len(run.seeds), max(0, cfg.num_envs - len(envs))))
    if topup:
        run.log.print(f"designer: {len(envs)}/{cfg.num_envs} valid; topping up the pool with {len(topup)} "
                      f"seed environments from {cfg.unflagged.seed_pool or run.setting.seeds} (not rewarded to the designer)")
    state["pool"] = envs + topup
    state["lengths"] = {e.env_id: state["lengths"][e.env_id] for e in state["pool"] if e.env_id in state["lengths"]}
    by_env = {e.env_id: [p.outcome() for p in scored_hinted if p.env_id == e.env_id] for e in envs}
    return Regen(envs, hints, hinted, rejected, regret.Epoch(step, samples, by_env, timeouts=hung))


def design(run, step, metrics):
    """G designer slots of this epoch's skills, divided between the ranks: (environments, designer
    samples, rejected attempts), every rank's: environments and samples in slot order, rejections by
    attempt then slot. Each rejection is printed."""
    cfg = run.cfg
    skills = designer.slots_for_epoch(run.skills, step // cfg.regen_interval, cfg.unflagged.skills_per_regen,
                                      cfg.num_envs)
    parts = launch.divide(run, [1.0] * len(skills), lambda mine: [designer.design(
        run.gen, run.tokenizer, {i: skills[i] for i in mine}, setting=run.setting, corpus=run.corpus,
        memory=run.memory, params=run.params["designer"], max_turns=cfg.max_turns, seed=cfg.seed,
        rollout_id=step, max_attempts=cfg.unflagged.designer_attempts, audit_params=run.params["audit"],
        progress="design" if run.rank == 0 else None)], per_rank=True)
    envs = sorted((e for envs, _, _ in parts for e in envs), key=lambda e: e.env_id)   # by slot
    samples = sorted((s for _, samples, _ in parts for s in samples), key=lambda s: s.env_id)
    rejected = sorted((f for _, _, stats in parts for f in stats["failures"]), key=lambda f: (f["attempt"], f["slot"]))
    attempts = sum(stats["num_attempts"] for _, _, stats in parts)
    metrics.update({"designer/valid_rate": len(envs) / len(skills), "designer/attempts": attempts})
    for failure in rejected:
        run.log.print(designer.rejection_line(failure, cfg.unflagged.designer_attempts))
    run.log.print(f"designer: {len(envs)}/{len(skills)} environments valid after {attempts} attempts; "
                  f"rejections by stage: {dict(Counter(f['stage'] for f in rejected)) or 'none'}")
    return envs, samples, rejected


# --- 2. the plays -------------------------------------------------------------------------------
def trained_plays(run, step, times, metrics):
    """This step's trained plays: K of each pool environment not blacklisted, seeded per play and salted
    by --seed and the step (at a regen step they are the first K of the hinted plays' seeds, METHOD
    13.3). The fixed-pool baseline takes its pool's next G environments; the RLVE baseline plays a new RLVE
    problem per environment, at its adaptive difficulty (baselines/rlve.py)."""
    cfg, state = run.cfg, run.state
    if cfg.pool:
        state["pool"] = next_from_pool(run.fixed_pool, state, cfg.num_envs)
    with timer(times, "play"):
        if not cfg.rlve:
            return play_on_ranks(run, [e for e in state["pool"] if e.env_id not in state["blacklist"]],
                                 cfg.plays_per_env, step)
        from baselines import rlve
        names = next_from_pool(rlve.ENVIRONMENTS, state, cfg.num_envs)
        played = rlve.play_round(state["rlve"], names, state["rng"], run.gen, run.tokenizer, cfg.plays_per_env,
                                 lambda sizes, work: launch.divide(run, sizes, work), params=run.params["agent"],
                                 max_context=cfg.max_context, max_new_tokens=cfg.max_new_tokens,
                                 thinking=cfg.thinking == "on")
    metrics.update(state["rlve"].metrics())
    return played


def play_on_ranks(run, envs, num_plays, step, hints=None):
    """`num_plays` plays of each environment (with its hint), seeded per play, salted by --seed and step; the
    ranks divide the (environment, play) pairs, balanced by each environment's mean length when it
    was last played. Every rank returns them all, environment-major."""
    cfg = run.cfg
    salt = f"{cfg.seed}/{step}" if cfg.seed else step   # --seed 0 plays the instances it always played
    pairs = [(i, seed) for i, env in enumerate(envs) for seed in agent.play_seeds(env.env_id, num_plays, salt)]
    lengths = run.state["lengths"]   # env_id -> mean generated tokens of a play (of the pool's)
    played = launch.divide(run, [lengths.get(envs[i].env_id, 1.0) for i, _ in pairs], lambda mine: agent.play(
        [envs[pairs[k][0]] for k in mine], run.gen, run.tokenizer, 1, [hints[pairs[k][0]] for k in mine]
        if hints else None, params=run.params["agent"], seeds=[[pairs[k][1]] for k in mine],
        max_turns=cfg.max_turns, max_context=cfg.max_context, max_new_tokens=cfg.max_new_tokens,
        thinking=cfg.thinking == "on", progress=("hinted plays" if hints else "plays") if run.rank == 0 else None))
    for env in envs:
        tokens = [e.num_generated_tokens for e in played if e.env_id == env.env_id]
        lengths[env.env_id] = sum(tokens) / len(tokens) if tokens else 1.0
    return played


def next_from_pool(pool, state, n):
    """Fixed-pool baseline: n environments without replacement, reshuffled when exhausted."""
    chosen = []
    while len(chosen) < min(n, len(pool)):
        if not state["order"]:
            state["order"] = list(range(len(pool)))
            state["pool_rng"].shuffle(state["order"])
        chosen.append(pool[state["order"].pop()])
    return chosen


# --- 4. the delayed designer scoring; 5. the update ---------------------------------------------------
def score_designer(run, finished, episodes):
    """The finished epochs' designer samples with their advantages: [(grpo.Sample, raw x)]; the role
    scale counts this step's agent episodes (METHOD 6.2 step 4)."""
    import grpo
    cfg, num_agent = run.cfg, grpo.num_trained_episodes(episodes)
    batch = []
    for epoch in (e for e in finished if e is not None):   # None: no epoch was open
        raw, advantages = regret.score_designer_batch(cfg.designer_reward, epoch.outcomes(), num_agent=num_agent,
                                                      regen_interval=cfg.regen_interval, tracker=run.state["tracker"],
                                                      **cfg.plateau())
        batch += [(grpo.Sample(s.tokens, s.loss_mask, s.logprobs, a), x)
                  for s, x, a in zip(epoch.samples, raw, advantages) if a is not None]
    return batch


def update_policy(run, batch, times):
    """One optimizer step on the whole batch (every rank passes all of it and trains on its share). The
    engine sleeps from here to the next step's weight push."""
    import grpo
    with timer(times, "update"):
        run.gen.sleep()
        # The log-probs of the update are at train_temperature (1.0; 0.7 for tool use with Qwen3-4B), not at
        # the sampling temperature: the TIS weight is then pi_train / pi_rollout, as officially (METHOD 7.2).
        return grpo.update(run.model, run.optimizer, batch, micro_token_budget=run.cfg.unflagged.micro_token_budget,
                           temperature=run.cfg.unflagged.train_temperature,
                           activation_checkpointing=run.device == "cuda",   # activations, not weights, fill a GPU
                           kl_coef=run.cfg.kl_coef, ref_model=run.ref_model) if batch else {}


# --- 6. memory; 7. the log line and the checkpoint -------------------------------------------------
def remember(run, regen, played, step):
    """Memory records each new environment with its win rate and raw regret at the regen step
    (METHOD 8); the step's samples are dumped for people. Returns the designer's regret and length metrics."""
    scores = {}
    # The new epoch has recorded this regen step's plays alone; its outcomes are in slot order, as the envs.
    for env, outcome in zip(regen.envs, regen.epoch.outcomes()):
        scores[env.env_id] = dict(win_rate=regret.share_won(outcome.window_rewards[0]), regret=outcome.regret)
        if run.memory is not None:
            run.memory.add(env.env_id, env.skill, env.code, scores[env.env_id]["win_rate"], outcome.regret, step)
    if run.memory is not None and run.rank == 0:   # every rank holds the memory; one writes it
        run.memory.save()
    run.log.samples(step, regen, played, scores)
    lines = [len(e.code.splitlines()) for e in regen.envs]
    return {"designer/regret": sum(v["regret"] for v in scores.values()) / len(scores),
            "designer/env_lines": sum(lines) / len(lines)} if scores else {}


def step_metrics(played, episodes, agent_samples, designer_batch, update, times, start):
    metrics = {**report.agent_metrics(played, episodes), "agent/samples": len(agent_samples),
               **report.designer_metrics(designer_batch), "seconds": time.perf_counter() - start}
    metrics.update({f"grpo/{k}": v for k, v in update.items() if isinstance(v, (int, float))})
    metrics["tokens_per_s"] = sum(e.num_generated_tokens for e in played) / max(1e-9, times.get("play", 0.0))
    return {**metrics, **{f"time/{k}": v for k, v in times.items()}}


def log_and_save(run, step, played, episodes, metrics):
    """The step's line and metrics, its plays every R steps, and a checkpoint every --save-every steps,
    at the end and on Ctrl-C (none with --save-every 0). False when Ctrl-C stopped the run (every rank after the same step)."""
    cfg, state = run.cfg, run.state
    if step % cfg.regen_interval == 0:   # what the agent played, for people: every environment of the pool
        shares = {env_id: regret.share_won(rewards) for env_id, rewards in regret.group_rewards(episodes).items()}
        run.log.plays(step, played, shares)
    state["step"] = step + 1
    run.log.step(metrics)
    stopping = launch.agreed(run.stop, run.world)
    if cfg.save_every and (state["step"] % cfg.save_every == 0 or state["step"] == cfg.steps or stopping):
        save_checkpoint(run.dir, cfg, run.model, run.tokenizer, run.optimizer, run.memory, state, run.rank)
    if stopping:
        run.log.print(f"interrupted: saved step {state['step']}; continue with --resume {run.dir}" if cfg.save_every
                      else f"interrupted after step {state['step']}; no checkpoint (--save-every 0)")
    return not stopping


def log_blacklisted(run, hung):
    if hung:
        run.log.print(f"blacklisted (hung in load, reset or step; not played again): {', '.join(sorted(hung))}")


@contextlib.contextmanager
def timer(times, name):
    """Adds the block's wall time to times[name] (a phase may run twice in a step)."""
    start = time.perf_counter()
    yield
    times[name] = times.get(name, 0.0) + time.perf_counter() - start


if __name__ == "__main__":
    main()
