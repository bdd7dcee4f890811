"""regret.py: SPADE's reward math as small pure functions (plain floats and lists, no I/O, no torch).

The agent learns from outcomes. Every play of an environment ends with one raw reward (the last step's
reward clipped to [-1, 1] if the episode terminated, else 0), and the K = 8 plays of one environment at
one step form a GRPO group whose advantages are the z-scored rewards (`agent_advantages`, METHOD 6.1).
The designer learns from how useful its environment turned out to be, known once the whole regen
epoch of R steps has been played. The paper's signal is `blend_reward`:
x = 0.6 * plateau(w) + 0.4 * clip((R_hint - R_0) / 0.15, 0, 1). The plateau term pays for environments
the agent wins about half the time over the epoch (w = mean raw reward of all the epoch's plays). The
regret term pays for environments where the agent, given a short privileged hint that the same policy
wrote from the source code, does clearly better than without it at the same step (R_hint over 16 hinted
plays, R_0 over the regen step's 8 unhinted plays): solvable, but not solved yet. The raw signals are
mean-centred within each skill without dividing by the std, so a skill whose environments are all
equally good gives no gradient (`designer_advantages`), and multiplied by the role scale
S = min(50, N_agent / N_designer * R) (`role_scale`), which keeps ~24 designer samples from being
drowned by ~192 agent samples in the one shared update. designer_rewards.py applies these to an
epoch's outcomes, with the paper's variant or an ablation picked by name.
Convention used throughout: the mean of no plays is 0.0 (a hung game has no plays; a missing hint
counts as R_hint = 0, METHOD 5).
"""
from __future__ import annotations

import math


def mean_reward(rewards: list[float]) -> float:
    """Mean of raw episode rewards, 0.0 for no plays. This is the paper's "win rate" w_g fed to
    `plateau` (and R_0, R_hint): a crashed play (-1) pulls it down, unlike `win_rate`.
    Example: mean_reward([1, 0, 0, 1]) = 0.5; mean_reward([1, -1, 0.5, 0]) = 0.125; mean_reward([]) = 0.0.
    """
    return sum(rewards) / len(rewards) if rewards else 0.0


def win_rate(rewards: list[float]) -> float:
    """The memory's `actor_win_rate` (METHOD 8): fraction of plays with reward > 0, 0.0 for no plays.
    Not the plateau input (that is `mean_reward`); the two agree when rewards are 0/1.
    Example: win_rate([1, -1, 0.5, 0]) = 2/4 = 0.5 (mean_reward of the same plays is 0.125).
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


def plateau(win_rate: float, lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> float:
    """1 inside [lo, hi], falling linearly to 0 at lo - ramp and hi + ramp (0.15 and 0.85 by default).
    `win_rate` is w_g = `mean_reward` of the whole window (the paper's name for it).
    Example: plateau(0.5) = 1; plateau(0.3) = 1 - 0.1/0.25 = 0.6; plateau(0.8) = 0.2; plateau(0.1) = 0.
    """
    if not (lo <= hi and ramp > 0):
        raise ValueError(f"plateau needs lo <= hi and ramp > 0, got lo={lo} hi={hi} ramp={ramp}")
    if win_rate < lo:
        return max(0.0, 1.0 - (lo - win_rate) / ramp)
    if win_rate > hi:
        return max(0.0, 1.0 - (win_rate - hi) / ramp)
    return 1.0


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
    groups: dict[str, list[float]] = {}
    for x, skill in zip(rewards, skills):
        groups.setdefault(skill, []).append(x)
    return [(x - mean_reward(groups[skill])) * scale for x, skill in zip(rewards, skills)]


def role_scale(num_agent: int, num_designer: int, regen_interval: int, cap: float = 50.0) -> float:
    """Role-balancing scale S = min(cap, N_agent / N_designer * R) (METHOD 6.2 step 4); N_agent = agent
    episodes of the current step, N_designer = delayed designer samples kept for the batch. With either
    count 0 the ratio is undefined and S is 1.0, as officially: designer samples of a step whose agent
    plays all failed keep their centred advantages unscaled. Examples: games 192 / 24 * 4 = 32; tool use
    192 / 24 * 8 = 64 -> 50; (192, 0, 4) -> 1.0; (0, 24, 4) -> 1.0."""
    if num_agent < 0 or num_designer < 0 or regen_interval < 1:
        raise ValueError(f"bad counts: num_agent={num_agent} num_designer={num_designer} R={regen_interval}")
    return min(cap, num_agent / num_designer * regen_interval) if num_designer and num_agent else 1.0
