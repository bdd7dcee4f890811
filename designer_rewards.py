"""designer_rewards.py: what an environment's regen epoch is worth to the designer (METHOD 6.2-6.3).

At step t0 + R every designer sample of the epoch that started at t0 gets an `EnvOutcome` (its
environment's plays over the epoch and the hinted plays of the regen step) and a raw signal x from one
of the variants of METHOD 6.3, each one small function picked by name in `DESIGNER_REWARDS`: `blend`
(the paper), `solve_rate`, `regret_based`, `learning_potential`. `score_designer_batch` then does
METHOD 6.2's remaining moves in one call: samples with x < 0 are dropped (`keep_designer_sample`; never
happens with the floored paper default), the rest are centred per skill and scaled by the role scale
(regret.py's `designer_advantages` and `role_scale`). Pure functions and plain data, no I/O, no torch.
Not implemented, because every paper run has them off (METHOD 13.2): micro-LP, the frontier penalty,
the solver-variance bonus and the `ema_baseline` agent normalisation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from regret import blend_reward, designer_advantages, mean_reward, plateau, role_scale


@dataclass(frozen=True)
class EnvOutcome:
    """What one environment did in its regen epoch. spade.py builds one per delayed designer sample
    at scoring time (step t0 + R) and passes the batch to a `DESIGNER_REWARDS` variant.

    skill:          the designer sample's skill; the centring group of `designer_advantages`.
    window_rewards: raw rewards of the unhinted (trained) plays, one list per step offset o = t - t0;
                    offset 0 is the regen step. Inner lists may be empty (FAILED plays are dropped);
                    the outer list is shorter than R on the final flush.
    hinted_rewards: the regen step's hinted plays (never trained on); [] when every hinted play failed
                    (the game hung, say) or the variant computes no hints -> hinted mean 0 (METHOD 5).
    step_timeout:   the game's reset/step hung during the epoch; only `regret_based` punishes it.
    Example: EnvOutcome("Optimization", [[1, 0], [1, 1]], [1, 1, 0, 1]) has window_mean 0.75,
    regen_step_mean 0.5, hinted_mean 0.75, regret 0.25.
    """
    skill: str
    window_rewards: list[list[float]]
    hinted_rewards: list[float] = field(default_factory=list)
    step_timeout: bool = False

    def __post_init__(self):
        bad = [r for r in self.all_plays + list(self.hinted_rewards) if not -1.0 <= r <= 1.0]
        if bad:
            raise ValueError(f"episode rewards are clipped to [-1, 1] (METHOD 1.1), got {bad}")

    @property
    def all_plays(self) -> list[float]:
        return [r for step in self.window_rewards for r in step]

    @property
    def window_mean(self) -> float:
        """w_g: mean raw reward of every unhinted play of the window (plateau's "win rate")."""
        return mean_reward(self.all_plays)

    @property
    def regen_step_mean(self) -> float:
        """R_0 = r0_g: mean of the regen step's unhinted plays, the matched-timing baseline."""
        return mean_reward(self.window_rewards[0]) if self.window_rewards else 0.0

    @property
    def hinted_mean(self) -> float:
        """R_hint = Rh_g: mean of the hinted plays, 0.0 without any."""
        return mean_reward(self.hinted_rewards)

    @property
    def regret(self) -> float:
        """Raw R_hint - R_0 as the memory stores it (METHOD 8): may be negative, 0.0 without a hint."""
        return self.hinted_mean - self.regen_step_mean if self.hinted_rewards else 0.0


@dataclass
class Epoch:
    """One pool's epoch, from its regen step t0 to the next (METHOD 6.2): what its designer samples are
    scored on, R steps later. spade.py opens it at t0, records every step's unhinted rewards, and
    scores it when the next regen step (or the run's last step) closes it.

    samples: the designer samples of the environments that passed the gate (designer.DesignerSample:
             tokens, loss mask, log-probs, skill, env_id), one per new environment.
    hinted:  env_id -> the rewards of its hinted plays at t0.
    window:  env_id -> per step offset, the rewards of its unhinted plays (FAILED plays dropped).
    timeouts: the environments whose load, reset or step hung in the epoch.
    """
    t0: int
    samples: list
    hinted: dict[str, list[float]]
    window: dict[str, list[list[float]]] = field(default_factory=dict)
    timeouts: set[str] = field(default_factory=set)

    def __post_init__(self):
        self.window = self.window or {s.env_id: [] for s in self.samples}

    def record(self, rewards: dict[str, list[float]], hung: set[str]) -> None:
        """One step's unhinted rewards per environment, and the environments that hung."""
        for env_id, steps in self.window.items():
            steps.append(rewards.get(env_id, []))
        self.timeouts |= hung & set(self.window)

    def outcomes(self) -> list[EnvOutcome]:
        """One EnvOutcome per designer sample, in the samples' order."""
        return [EnvOutcome(s.skill, self.window[s.env_id], self.hinted.get(s.env_id, []), s.env_id in self.timeouts)
                for s in self.samples]


@dataclass
class LearningPotentialTracker:
    """Per-skill EMAs of the learning_potential ablation, written exactly as METHOD 6.3 does:
    mu_fast <- (1 - 0.98) mu_fast + 0.98 r, mu_slow <- (1 - 0.85) mu_slow + 0.85 r; the first update of
    a skill sets both to r. Plain dicts, so spade.py can checkpoint it with the run.
    Example: update("Optimization", 0.5) -> fast = slow = 0.5; update("Optimization", 1.0) ->
    fast = 0.02*0.5 + 0.98 = 0.99, slow = 0.15*0.5 + 0.85 = 0.925; gap = 0.065 / 0.26 = 0.25.
    """
    fast_weight: float = 0.98
    slow_weight: float = 0.85
    fast: dict[str, float] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if not self.fast_weight > self.slow_weight:   # the gap's normaliser 2 (fast - slow) must be positive
            raise ValueError(f"fast_weight ({self.fast_weight}) must exceed slow_weight ({self.slow_weight})")

    def update(self, skill: str, reward: float) -> None:
        if skill not in self.slow:
            self.fast[skill] = self.slow[skill] = reward
            return
        self.fast[skill] = (1 - self.fast_weight) * self.fast[skill] + self.fast_weight * reward
        self.slow[skill] = (1 - self.slow_weight) * self.slow[skill] + self.slow_weight * reward

    def gap(self, skill: str) -> float:
        """|mu_fast - mu_slow| / (2 (0.98 - 0.85)); only logged, never a reward."""
        return abs(self.fast[skill] - self.slow[skill]) / (2 * (self.fast_weight - self.slow_weight))


# Designer-reward variants (METHOD 6.3). One signature: a delayed batch of outcomes in, one raw x per
# outcome out. The batch, not one env, because learning_potential updates its tracker once per skill
# from the whole batch before scoring. `tracker` is used only by learning_potential; the plateau band
# (lo, hi, ramp) only by blend and solve_rate (the 4B later phase used 0.2, 0.4, 0.2).

def blend(outcomes: list[EnvOutcome], tracker: LearningPotentialTracker | None = None, *,
          lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> list[float]:
    """Paper default: `blend_reward(w, R_hint, R_0)`. No explicit step-timeout penalty (as the paper):
    a hung game has no hint and few plays, so x comes out ~0. Example: window [[0, 1], [0, 0]],
    hints [1, 1] -> w = 0.25, R_0 = 0.5 -> 0.6 * 0.4 + 0.4 * clip((1 - 0.5) / 0.15) = 0.64."""
    return [blend_reward(o.window_mean, o.hinted_mean, o.regen_step_mean, lo=lo, hi=hi, ramp=ramp)
            for o in outcomes]


def solve_rate(outcomes: list[EnvOutcome], tracker: LearningPotentialTracker | None = None, *,
               lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> list[float]:
    """Ablation, plateau only: x = plateau(w). Example: window [[0, 1], [0, 0]] -> plateau(0.25) = 0.4."""
    return [plateau(o.window_mean, lo, hi, ramp) for o in outcomes]


STEP_TIMEOUT_REWARD = -0.5  # regret_based only; kept (not masked) so hanging games are pushed down


def regret_based(outcomes: list[EnvOutcome], tracker: LearningPotentialTracker | None = None, *,
                 lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> list[float]:
    """x = max(0, R_hint - w): note w, the mean over the whole window, not R_0; -0.5 on a step
    timeout. Example: window [[0, 1], [0, 0]], hints [1, 1] -> 1 - 0.25 = 0.75."""
    return [STEP_TIMEOUT_REWARD if o.step_timeout else max(0.0, o.hinted_mean - o.window_mean)
            for o in outcomes]


def learning_potential(outcomes: list[EnvOutcome], tracker: LearningPotentialTracker | None = None, *,
                       lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> list[float]:
    """Ablation: update each skill's tracker once with the mean of all plays of that skill's envs in
    the batch (a skill with no plays is not updated), then x = |w - mu_slow(skill)|, mu_slow 0 for a
    skill never updated, and x = 0 for an environment with no plays in its window (all of them failed:
    a hung game is not rewarded). Mutates `tracker`: call once per delayed batch.
    Example (fresh tracker): envs of one skill with windows [[1, 1]] and [[0, 0, 0, 1]] -> skill mean
    3/6 = 0.5 -> mu_slow = 0.5 -> x = [|1 - 0.5|, |0.25 - 0.5|] = [0.5, 0.25]."""
    if tracker is None:
        raise ValueError("learning_potential needs its LearningPotentialTracker (tracker=...)")
    for skill in dict.fromkeys(o.skill for o in outcomes):
        plays = [r for o in outcomes if o.skill == skill for r in o.all_plays]
        if plays:
            tracker.update(skill, mean_reward(plays))
    return [abs(o.window_mean - tracker.slow.get(o.skill, 0.0)) if o.all_plays else 0.0 for o in outcomes]


DESIGNER_REWARDS = {"blend": blend, "solve_rate": solve_rate, "regret_based": regret_based,
                    "learning_potential": learning_potential}
KEEPS_NEGATIVE = {"regret_based"}  # variants whose x < 0 is a deliberate penalty, not a masked sample
# Variants whose regen steps write hints and run hinted plays: those that read R_hint, and solve_rate,
# whose reward does not but whose memory records regret (METHOD 10: blend with plateau weight 1).
# learning_potential computes none: its memory regret is 0 (METHOD 10).
NEEDS_HINTS = {"blend", "regret_based", "solve_rate"}


def keep_designer_sample(variant: str, x: float) -> bool:
    """METHOD 6.2 step 3: a sample with x < 0 is dropped from the batch (the general blend rule),
    except in KEEPS_NEGATIVE variants. Example: ("blend", -0.1) -> False; ("regret_based", -0.5) -> True.
    Callers normally go through `score_designer_batch`, which applies it before centring."""
    return x >= 0 or variant in KEEPS_NEGATIVE


def score_designer_batch(variant: str, outcomes: list[EnvOutcome], *, num_agent: int,
                         regen_interval: int, tracker: LearningPotentialTracker | None = None,
                         lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25,
                         cap: float = 50.0) -> tuple[list[float], list[float | None]]:
    """METHOD 6.2 steps 3-4 in one call: raw x per outcome from DESIGNER_REWARDS[variant], samples with
    x < 0 dropped (`keep_designer_sample`), per-skill centring of the kept ones, times S counted over
    the kept ones. Returns (raw x for logging, advantage per outcome with None = drop the sample).
    Example: blend, raw x [0.6, 0.2, 0.4] for skills [math, math, logic], num_agent 192, R 4
    -> S = 192 / 3 * 4 = 256 -> 50 -> advantages [10.0, -10.0, 0.0]."""
    if variant not in DESIGNER_REWARDS:
        raise ValueError(f"unknown designer reward {variant!r}; choose from {sorted(DESIGNER_REWARDS)}")
    raw = DESIGNER_REWARDS[variant](outcomes, tracker, lo=lo, hi=hi, ramp=ramp)
    kept = [i for i, x in enumerate(raw) if keep_designer_sample(variant, x)]
    scale = role_scale(num_agent, len(kept), regen_interval, cap)
    centred = designer_advantages([raw[i] for i in kept], [outcomes[i].skill for i in kept], scale)
    advantages: list[float | None] = [None] * len(outcomes)
    for i, advantage in zip(kept, centred):
        advantages[i] = advantage
    return raw, advantages
