"""SPADE's reward math, pure (plain floats, lists and dataclasses; no I/O, no torch): METHOD.md 6.

The agent: every play ends with one raw reward, and the K plays of one environment at one step form a
GRPO group whose advantages are the z-scored rewards (`agent_advantages`, `episode_advantages`).
The designer: an environment is scored once its regen epoch of R steps has been played (`Epoch`,
`EnvOutcome`), by a variant of `DESIGNER_REWARDS` (the paper's `blend`: 0.6 * plateau(win rate) +
0.4 * clipped hint regret); `score_designer_batch` drops x < 0 (but for the variants that keep
negatives: `regret_based`), centres x within each skill and scales it by the role scale S. A new variant is one function added
to `DESIGNER_REWARDS`.

Convention: the mean of no plays is 0.0. Not implemented, because every paper run has them off or
never reads them (METHOD 13.2): micro-LP, the frontier penalty, the solver-variance bonus, `ema_baseline`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


def mean_reward(rewards: list[float]) -> float:
    """Mean of raw episode rewards, 0.0 for no plays. This is the paper's "win rate" w_g fed to
    `plateau` (and R_0, R_hint): a play that scored -1 (a loss, or step() raising) pulls it down, unlike
    `share_won`.
    Example: mean_reward([1, 0, 0, 1]) = 0.5; mean_reward([1, -1, 0.5, 0]) = 0.125; mean_reward([]) = 0.0.
    """
    return sum(rewards) / len(rewards) if rewards else 0.0


def share_won(rewards: list[float]) -> float:
    """The share of plays won, reward > 0 (0.0 for no plays): the memory's `actor_win_rate` (METHOD 8)
    and the report's band. Not the plateau's win rate (that is `mean_reward`); the two agree when
    rewards are 0/1.
    Example: share_won([1, -1, 0.5, 0]) = 2/4 = 0.5 (mean_reward of the same plays is 0.125).
    """
    return sum(r > 0 for r in rewards) / len(rewards) if rewards else 0.0


def agent_advantages(rewards: list[float]) -> list[float]:
    """Per-environment GRPO advantages (METHOD 6.1): A_i = (r_i - mean) / (std + 1e-8), population std.
    A group whose plays are all equal (a single play included) carries no signal: exact zeros, rather
    than float round-off divided by 1e-8.
    Example: [1, 0, 0, 0] -> mean 0.25, std sqrt(0.1875) = 0.4330 -> [1.7321, -0.5774, -0.5774, -0.5774].
    """
    if not rewards or max(rewards) == min(rewards):
        return [0.0] * len(rewards)
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + 1e-8) for r in rewards]


def group_rewards(episodes) -> dict[str, list[float]]:
    """env_id -> the rewards of its plays, in order (anything with .env_id and .reward)."""
    groups = {}
    for episode in episodes:
        groups.setdefault(episode.env_id, []).append(episode.reward)
    return groups


def episode_advantages(episodes) -> list[float]:
    """Each play's `agent_advantages` within its environment's group, in the plays' order. A group
    whose plays all scored the same gives zeros: GRPO learns nothing without contrast, which is why
    the designer is paid to keep win rates inside the band."""
    groups = {env_id: iter(agent_advantages(rewards)) for env_id, rewards in group_rewards(episodes).items()}
    return [next(groups[episode.env_id]) for episode in episodes]


def plateau(win_rate: float, lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> float:
    """1 inside [lo, hi], falling linearly to 0 at lo - ramp and hi + ramp (0.15 and 0.85 by default).
    `win_rate` is w_g = `mean_reward` of the whole window (the paper's name for it).
    Example: plateau(0.5) = 1; plateau(0.3) = 1 - 0.1/0.25 = 0.6; plateau(0.8) = 0.2; plateau(0.1) = 0.
    """
    if not (lo <= hi and ramp > 0):
        raise ValueError(f"plateau needs lo <= hi and ramp > 0, got lo={lo} hi={hi} ramp={ramp}")
    return max(0.0, 1.0 - max(lo - win_rate, win_rate - hi, 0.0) / ramp)   # the distance outside [lo, hi]


def hint_regret(hinted_mean: float, unhinted_mean: float, scale: float = 0.15, floor: bool = True) -> float:
    """Normalised hint regret rho = (R_hint - R_0) / scale. With `floor` (the paper's
    --spade-regret-floor) it is clipped to [0, 1]: capped at 1 as well, not only floored at 0.
    Example: (0.35, 0.3) -> 0.3333; (0.5, 0.3) -> 1.333 -> 1.0; (0.2, 0.5) -> 0.0, or -2.0 unfloored.
    """
    rho = (hinted_mean - unhinted_mean) / scale
    return min(1.0, max(0.0, rho)) if floor else rho


def blend_reward(win_rate: float, hinted_mean: float, unhinted_mean: float, w_plateau: float = 0.6,
                 w_regret: float = 0.4, lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25,
                 scale: float = 0.15, floor: bool = True) -> float:
    """The paper's designer reward (METHOD 6.3): w_plateau * plateau(w) + w_regret * hint_regret,
    in [0, 1] with the default floor. `win_rate` = w over the window, `unhinted_mean` = R_0.
    Example: w = 0.3, R_hint = 0.35, R_0 = 0.3 -> 0.6 * 0.6 + 0.4 * 0.3333 = 0.4933.
    """
    return (w_plateau * plateau(win_rate, lo, hi, ramp)
            + w_regret * hint_regret(hinted_mean, unhinted_mean, scale, floor))


def designer_advantages(rewards: list[float], skills: list[str], scale: float) -> list[float]:
    """A_g = (x_g - mean of x over the same skill in this batch) * S; no std division (METHOD 6.2).
    A skill with one sample gets 0. Example: x [0.6, 0.2, 0.4], skills [math, math, logic], S = 32
    -> math mean 0.4 -> [6.4, -6.4, 0.0]."""
    if len(rewards) != len(skills):
        raise ValueError(f"{len(rewards)} designer rewards but {len(skills)} skills")
    means = {skill: mean_reward([x for x, s in zip(rewards, skills) if s == skill]) for skill in set(skills)}
    return [(x - means[skill]) * scale for x, skill in zip(rewards, skills)]


def role_scale(num_agent: int, num_designer: int, regen_interval: int, cap: float = 50.0) -> float:
    """Role-balancing scale S = min(cap, N_agent / N_designer * R) (METHOD 6.2 step 4); N_agent = agent
    episodes of the current step, N_designer = delayed designer samples kept for the batch. With either
    count 0 the ratio is undefined and S is 1.0, as officially: designer samples of a step whose agent
    plays all failed keep their centred advantages unscaled. Examples: games 192 / 24 * 4 = 32; tool use
    192 / 24 * 8 = 64 -> 50; (192, 0, 4) -> 1.0; (0, 24, 4) -> 1.0."""
    if num_agent < 0 or num_designer < 0 or regen_interval < 1:
        raise ValueError(f"bad counts: num_agent={num_agent} num_designer={num_designer} R={regen_interval}")
    return min(cap, num_agent / num_designer * regen_interval) if num_designer and num_agent else 1.0


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
    window_plays, hinted_plays: the same plays as agent.Episode outcomes (everything a play records but
                    its token sequences and transcript: status, turns, tokens generated, ...), for a
                    variant that reads more than rewards; empty where an outcome is built by hand.
    code, sample:   what the designer wrote: the environment as the gate admitted it, and its
                    designer.DesignerSample (prompt and response text, tokens, corpus document);
                    "" and None where an outcome is built by hand.
    Example: EnvOutcome("Optimization", [[1, 0], [1, 1]], [1, 1, 0, 1]) has window_mean 0.75,
    regen_step_mean 0.5, hinted_mean 0.75, regret 0.25.
    """
    skill: str
    window_rewards: list[list[float]]
    hinted_rewards: list[float] = field(default_factory=list)
    step_timeout: bool = False
    window_plays: list[list] = field(default_factory=list)
    hinted_plays: list = field(default_factory=list)
    code: str = ""
    sample: object = None

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
    def both_arms(self) -> bool:
        """Whether R_hint and R_0 were both measured: hinted plays, and unhinted plays at the regen step.
        A game that hangs in a hinted play is blacklisted before its unhinted plays, and R_0 = 0 (of no
        plays) would then give it the largest regret."""
        return bool(self.hinted_rewards and self.window_rewards and self.window_rewards[0])

    @property
    def regret(self) -> float:
        """Raw R_hint - R_0 as the memory stores it (METHOD 8): may be negative; 0.0 without both arms."""
        return self.hinted_mean - self.regen_step_mean if self.both_arms else 0.0


@dataclass
class Epoch:
    """One pool's epoch, from its regen step t0 to the next (METHOD 6.2): what its designer samples are
    scored on, R steps later. The whole window, with R = 4 and regen steps 0, 4, 8 (spade.train):

        step 0   new_pool writes pool A and opens epoch A (A's hinted plays: R_hint); A records step 0's plays
        step 1-3 A records each step's unhinted plays of its environments
        step 4   new_pool writes pool B; the hand-over swaps B in and A is finished before step 4's plays:
                 A's window is steps 0-3, and A's designer samples train in step 4's update (D = R)
        last     the open epoch is finished too, with the steps it has, and scored in the last update


    samples: the designer samples of the environments that passed the gate (designer.DesignerSample:
             tokens, loss mask, log-probs, skill, env_id), one per new environment.
    hinted:  env_id -> its hinted plays at t0 (agent.Episode outcomes: anything with .reward).
    window:  env_id -> per step offset, its unhinted plays (FAILED plays dropped).
    timeouts: the environments whose load, reset or step hung in the epoch.
    """
    t0: int
    samples: list
    hinted: dict[str, list]
    window: dict[str, list[list]] = field(default_factory=dict)
    timeouts: set[str] = field(default_factory=set)

    def __post_init__(self):
        self.window = self.window or {s.env_id: [] for s in self.samples}

    def record(self, plays, hung: set[str]) -> None:
        """One step's unhinted plays (of every environment; anything with .env_id and .reward), and
        the environments that hung."""
        for env_id, steps in self.window.items():
            steps.append([p for p in plays if p.env_id == env_id])
        self.timeouts |= hung & set(self.window)

    def outcomes(self) -> list[EnvOutcome]:
        """One EnvOutcome per designer sample, in the samples' order."""
        rewards = lambda plays: [p.reward for p in plays]
        return [EnvOutcome(s.skill, [rewards(step) for step in self.window[s.env_id]],
                           rewards(self.hinted.get(s.env_id, [])), s.env_id in self.timeouts,
                           self.window[s.env_id], self.hinted.get(s.env_id, []), code=s.code, sample=s)
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
        """|mu_fast - mu_slow| / (2 (0.98 - 0.85)): the official code's diagnostic, never a reward (the
        loop does not log it)."""
        return abs(self.fast[skill] - self.slow[skill]) / (2 * (self.fast_weight - self.slow_weight))


# Designer-reward variants (METHOD 6.3). One signature: a delayed batch of outcomes in, one raw x per
# outcome out. The batch, not one env, because learning_potential updates its tracker once per skill
# from the whole batch before scoring. `tracker` is used only by learning_potential; the plateau band
# (lo, hi, ramp) only by blend and solve_rate (the 4B later phase used 0.2, 0.4, 0.2).

def blend(outcomes: list[EnvOutcome], tracker: LearningPotentialTracker | None = None, *,
          lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> list[float]:
    """Paper default: `blend_reward(w, R_hint, R_0)`. No explicit step-timeout penalty (as the paper): a
    game is blacklisted when it hangs and plays no more, so its x is what its plays before that earned;
    near 0 only when it hangs early in its window (few plays, and no regret without both arms,
    EnvOutcome.both_arms). Example: window [[0, 1], [0, 0]], hints [1, 1] -> w = 0.25, R_0 = 0.5 -> 0.6 * 0.4 + 0.4 *
    clip((1 - 0.5) / 0.15) = 0.64; window [[], []], hints [1, 1] -> 0.0."""
    return [blend_reward(o.window_mean, o.hinted_mean, o.regen_step_mean if o.both_arms else o.hinted_mean,
                         lo=lo, hi=hi, ramp=ramp) for o in outcomes]


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


# The variants by name (--designer-reward). A variant may say two things of itself, as attributes:
# `keeps_negative` (default False): its x < 0 is a deliberate penalty, not a masked sample;
# `needs_hints` (default True): its regen steps write hints and run hinted plays. solve_rate does not
# read R_hint, but its memory records regret (METHOD 10: blend with plateau weight 1);
# learning_potential computes none, and its memory regret is 0 (METHOD 10).
DESIGNER_REWARDS = {"blend": blend, "solve_rate": solve_rate, "regret_based": regret_based,
                    "learning_potential": learning_potential}
regret_based.keeps_negative = True
learning_potential.needs_hints = False


def needs_hints(variant: str) -> bool:
    return getattr(DESIGNER_REWARDS[variant], "needs_hints", True)


def keep_designer_sample(variant: str, x: float) -> bool:
    """METHOD 6.2 step 3: a sample with x < 0 is dropped from the batch (the general blend rule),
    except in variants that keep negatives. Example: ("blend", -0.1) -> False; ("regret_based", -0.5)
    -> True. Callers normally go through `score_designer_batch`, which applies it before centring."""
    return x >= 0 or getattr(DESIGNER_REWARDS[variant], "keeps_negative", False)


def score_designer_batch(variant: str, outcomes: list[EnvOutcome], *, num_agent: int, regen_interval: int,
                         tracker: LearningPotentialTracker | None = None, lo: float = 0.4, hi: float = 0.6,
                         ramp: float = 0.25) -> tuple[list[float], list[float | None]]:
    """METHOD 6.2 steps 3-4 in one call: raw x per outcome from DESIGNER_REWARDS[variant], samples with
    x < 0 dropped (`keep_designer_sample`), per-skill centring of the kept ones, times S counted over
    the kept ones. Returns (raw x for logging, advantage per outcome with None = drop the sample).
    Example: blend, raw x [0.6, 0.2, 0.4] for skills [math, math, logic], num_agent 192, R 4
    -> S = 192 / 3 * 4 = 256 -> 50 -> advantages [10.0, -10.0, 0.0]."""
    if variant not in DESIGNER_REWARDS:
        raise ValueError(f"unknown designer reward {variant!r}; choose from {sorted(DESIGNER_REWARDS)}")
    raw = DESIGNER_REWARDS[variant](outcomes, tracker, lo=lo, hi=hi, ramp=ramp)
    kept = [i for i, x in enumerate(raw) if keep_designer_sample(variant, x)]
    scale = role_scale(num_agent, len(kept), regen_interval)
    centred = dict(zip(kept, designer_advantages([raw[i] for i in kept], [outcomes[i].skill for i in kept], scale)))
    return raw, [centred.get(i) for i in range(len(outcomes))]   # None: the sample is dropped
