"""Hand-computed checks of regret.py (METHOD.md sections 6 and 7.1): every
expected number below was worked out on paper from the formulas, not produced by running the code."""
import math

import pytest

import regret
from regret import (DESIGNER_REWARDS, EnvOutcome, LearningPotentialTracker, agent_advantages,
                    blend_reward, designer_advantages, hint_regret, keep_designer_sample, mean_reward, plateau,
                    role_scale, score_designer_batch, share_won)

approx = pytest.approx


# ---- mean_reward vs win_rate: the plateau input vs the memory's actor_win_rate

def test_mean_reward_and_win_rate_differ_on_crashes_and_partial_credit():
    plays = [1, -1, 0.5, 0]
    assert mean_reward(plays) == approx(0.125)   # (1 - 1 + 0.5 + 0) / 4
    assert share_won(plays) == approx(0.5)        # two of four plays > 0
    assert mean_reward([1, 0, 0, 1]) == share_won([1, 0, 0, 1]) == approx(0.5)  # agree on 0/1


def test_mean_reward_and_win_rate_of_no_plays_are_zero():
    assert mean_reward([]) == 0.0
    assert share_won([]) == 0.0


# ---- agent advantages (METHOD 6.1)

def test_agent_advantages_z_score_with_population_std():
    # mean 0.25, population var (0.75^2 + 3 * 0.25^2) / 4 = 0.1875, std 0.4330127
    std = math.sqrt(0.1875)
    assert agent_advantages([1, 0, 0, 0]) == approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std])
    assert agent_advantages([1, 0, 0, 0]) == approx([1.7320508, -0.5773503, -0.5773503, -0.5773503])


def test_agent_advantages_with_a_crash():
    # [1, -1]: mean 0, population std 1 -> [1, -1] (a sample std would give 0.7071)
    assert agent_advantages([1.0, -1.0]) == approx([1.0, -1.0], abs=1e-7)


def test_agent_advantages_degenerate_groups_are_exact_zeros():
    assert agent_advantages([]) == []
    assert agent_advantages([0.7]) == [0.0]
    assert agent_advantages([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]  # 0.1 * 3 / 3 != 0.1 in floats
    assert agent_advantages([1, 1, 1, 1, 1, 1, 1, 1]) == [0.0] * 8


# ---- plateau (METHOD 6.3): band [0.4, 0.6], ramp 0.25, zero at 0.15 and 0.85

@pytest.mark.parametrize("w, expected", [
    (0.5, 1.0), (0.4, 1.0), (0.6, 1.0),          # inside, and exactly on the band edges
    (0.39, 0.96), (0.61, 0.96),                  # just outside: 1 - 0.01 / 0.25
    (0.3, 0.6), (0.8, 0.2), (0.25, 0.4),         # on the ramps
    (0.16, 0.04), (0.84, 0.04),                  # just inside the zeros
    (0.15, 0.0), (0.85, 0.0),                    # exactly at the zeros
    (0.14, 0.0), (0.86, 0.0), (0.0, 0.0), (1.0, 0.0), (-1.0, 0.0),  # beyond: clamped at 0
])
def test_plateau_paper_band(w, expected):
    assert plateau(w) == approx(expected, abs=1e-12)


def test_plateau_later_phase_band():
    # 4B later phase: lo 0.2, hi 0.4, ramp 0.2 -> zero at 0.0 and 0.6
    assert plateau(0.1, lo=0.2, hi=0.4, ramp=0.2) == approx(0.5)
    assert plateau(0.5, lo=0.2, hi=0.4, ramp=0.2) == approx(0.5)
    assert plateau(0.3, lo=0.2, hi=0.4, ramp=0.2) == 1.0


def test_plateau_rejects_a_bad_band():
    with pytest.raises(ValueError):
        plateau(0.5, lo=0.6, hi=0.4)
    with pytest.raises(ValueError):
        plateau(0.5, ramp=0.0)


# ---- hint regret

def test_hint_regret_positive_inside_and_capped():
    assert hint_regret(0.35, 0.3) == approx(1 / 3)   # 0.05 / 0.15
    assert hint_regret(0.5, 0.3) == 1.0              # 0.2 / 0.15 = 1.333 -> capped at 1
    assert hint_regret(0.5, 0.3, floor=False) == approx(4 / 3)


def test_hint_regret_negative_floored_and_unfloored():
    assert hint_regret(0.2, 0.5) == 0.0
    assert hint_regret(0.2, 0.5, floor=False) == approx(-2.0)   # -0.3 / 0.15
    assert hint_regret(0.0, 0.0) == 0.0


def test_hint_regret_other_scale():
    assert hint_regret(0.6, 0.5, scale=0.5) == approx(0.2)


# ---- blend (paper default)

def test_blend_reward_worked_example():
    # plateau(0.3) = 0.6, regret 0.05 / 0.15 = 1/3 -> 0.6 * 0.6 + 0.4 / 3
    assert blend_reward(0.3, 0.35, 0.3) == approx(0.36 + 0.4 / 3)


def test_blend_reward_extremes():
    assert blend_reward(0.5, 1.0, 0.0) == approx(1.0)     # in band, full regret
    assert blend_reward(1.0, 0.5, 1.0) == 0.0             # trivial env: plateau 0, regret floored
    assert blend_reward(0.0, 0.0, 0.0) == 0.0             # unsolvable env, no hint
    assert blend_reward(0.5, 0.0, 0.3) == approx(0.6)     # negative regret floored, plateau only
    assert blend_reward(0.5, 0.0, 0.3, floor=False) == approx(0.6 + 0.4 * -2.0)  # -0.2: would be masked


def test_blend_reward_weights_and_band_are_passed_through():
    # solve-rate weights: plateau only; band 0.2..0.4 ramp 0.2: plateau(0.5) = 0.5
    assert blend_reward(0.5, 1.0, 0.0, w_plateau=1.0, w_regret=0.0, lo=0.2, hi=0.4, ramp=0.2) == approx(0.5)
    # regret scale 0.5: (0.6 - 0.5) / 0.5 = 0.2 -> 0.6 * 1 + 0.4 * 0.2
    assert blend_reward(0.5, 0.6, 0.5, scale=0.5) == approx(0.68)


# ---- EnvOutcome

def test_env_outcome_statistics():
    o = EnvOutcome("Optimization", [[1, 0], [1, 1]], [1, 1, 0, 1])
    assert o.all_plays == [1, 0, 1, 1]
    assert o.window_mean == approx(0.75)
    assert o.regen_step_mean == approx(0.5)
    assert o.hinted_mean == approx(0.75)
    assert o.regret == approx(0.25)


def test_env_outcome_without_hint_or_plays():
    o = EnvOutcome("Optimization", [[1, 1], []])
    assert o.hinted_mean == 0.0
    assert o.regret == 0.0             # memory stores 0 when there was no hint, not -R_0
    empty = EnvOutcome("Optimization", [], step_timeout=True)
    assert (empty.window_mean, empty.regen_step_mean, empty.hinted_mean) == (0.0, 0.0, 0.0)


def test_env_outcome_negative_regret():
    o = EnvOutcome("Logical Deduction", [[1, 1, 1, 0]], [0, 1])
    assert o.regret == approx(-0.25)   # 0.5 - 0.75


def test_env_outcome_rejects_unclipped_rewards():
    with pytest.raises(ValueError):
        EnvOutcome("Optimization", [[1, 2]])
    with pytest.raises(ValueError):
        EnvOutcome("Optimization", [[1]], [-1.5])


# ---- the four variants, each through DESIGNER_REWARDS

HARD = EnvOutcome("Mathematical Reasoning", [[0, 1], [0, 0]], [1, 1])   # w 0.25, R_0 0.5, R_hint 1
EASY = EnvOutcome("Mathematical Reasoning", [[1, 1], [1, 1]], [1, 0])   # w 1, R_0 1, R_hint 0.5
HUNG = EnvOutcome("Logical Deduction", [[0], []], [], step_timeout=True)  # w 0, no hint


def test_variant_blend():
    # HARD: 0.6 * plateau(0.25) + 0.4 * clip(0.5 / 0.15) = 0.24 + 0.4; EASY: 0 + 0; HUNG: 0 (no penalty)
    assert DESIGNER_REWARDS["blend"]([HARD, EASY, HUNG]) == approx([0.64, 0.0, 0.0])


def test_a_game_without_unhinted_plays_at_its_regen_step_earns_no_regret():
    """It hung in a hinted play and was blacklisted before the unhinted plays: R_0 is not 0 but unknown."""
    hung_in_hint = EnvOutcome("Logical Deduction", [[], []], [1, 1, 1], step_timeout=True)
    assert not hung_in_hint.both_arms and hung_in_hint.regret == 0.0
    assert DESIGNER_REWARDS["blend"]([hung_in_hint]) == [0.0]       # not 0.4 * clip((1 - 0) / 0.15) = 0.4
    assert HARD.both_arms and EnvOutcome("Optimization", [[0]], [1]).regret == 1.0


def test_variant_blend_band():
    # band 0.2..0.4 ramp 0.2: plateau(0.25) = 1 -> 0.6 + 0.4
    assert DESIGNER_REWARDS["blend"]([HARD], lo=0.2, hi=0.4, ramp=0.2) == approx([1.0])


def test_variant_solve_rate():
    assert DESIGNER_REWARDS["solve_rate"]([HARD, EASY, HUNG]) == approx([0.4, 0.0, 0.0])


def test_hints_for_every_variant_but_learning_potential():
    # solve_rate's reward ignores R_hint, but its memory ranks environments by regret (METHOD 10).
    assert [name for name in DESIGNER_REWARDS if regret.needs_hints(name)] == ["blend", "solve_rate", "regret_based"]


def test_variant_regret_based():
    # HARD: max(0, 1 - 0.25) (window mean, not R_0); EASY: max(0, 0.5 - 1) = 0; HUNG: timeout -0.5
    assert DESIGNER_REWARDS["regret_based"]([HARD, EASY, HUNG]) == approx([0.75, 0.0, -0.5])


def test_variant_learning_potential_first_and_second_batch():
    tracker = LearningPotentialTracker()
    # batch 1: math plays [0,1,0,0,1,1,1,1] -> mean 5/8 = 0.625; logic plays [0] -> 0.0 (first: set)
    x = DESIGNER_REWARDS["learning_potential"]([HARD, EASY, HUNG], tracker)
    assert tracker.slow == approx({"Mathematical Reasoning": 0.625, "Logical Deduction": 0.0})
    assert tracker.fast == approx({"Mathematical Reasoning": 0.625, "Logical Deduction": 0.0})
    assert x == approx([0.375, 0.375, 0.0])   # |0.25 - 0.625|, |1 - 0.625|, |0 - 0|
    # batch 2: math only, plays all 1 -> slow = 0.15 * 0.625 + 0.85 = 0.94375; fast = 0.02*0.625 + 0.98
    x = DESIGNER_REWARDS["learning_potential"]([EASY], tracker)
    assert tracker.slow["Mathematical Reasoning"] == approx(0.94375)
    assert tracker.fast["Mathematical Reasoning"] == approx(0.9925)
    assert tracker.slow["Logical Deduction"] == 0.0          # untouched
    assert x == approx([0.05625])                            # |1 - 0.94375|


def test_variant_learning_potential_rewards_no_environment_without_plays():
    """The official delayed LP: an env whose plays all failed gets 0.0 (not |0 - mu_slow|), and a skill
    with no plays in the batch keeps its EMAs (no update with 0.0)."""
    tracker = LearningPotentialTracker()
    DESIGNER_REWARDS["learning_potential"]([EASY], tracker)                   # math: mu_slow = 1
    silent = EnvOutcome("Mathematical Reasoning", [[], []])
    unseen = EnvOutcome("Optimization", [[], []])
    assert DESIGNER_REWARDS["learning_potential"]([silent, unseen], tracker) == [0.0, 0.0]
    assert tracker.slow == {"Mathematical Reasoning": 1.0} and tracker.fast == {"Mathematical Reasoning": 1.0}


def test_lp_tracker_needs_fast_above_slow():
    with pytest.raises(ValueError, match="must exceed"):
        LearningPotentialTracker(fast_weight=0.85, slow_weight=0.85)


def test_variant_learning_potential_needs_its_tracker():
    with pytest.raises(ValueError):
        DESIGNER_REWARDS["learning_potential"]([HARD])


def test_every_variant_takes_the_common_signature_and_an_empty_batch():
    for fn in DESIGNER_REWARDS.values():
        assert fn([], LearningPotentialTracker(), lo=0.4, hi=0.6, ramp=0.25) == []


# ---- the learning-potential tracker itself

def test_lp_tracker_first_and_second_update():
    t = LearningPotentialTracker()
    t.update("Optimization", 0.5)
    assert (t.fast["Optimization"], t.slow["Optimization"]) == (0.5, 0.5)
    assert t.gap("Optimization") == 0.0
    t.update("Optimization", 1.0)
    assert t.fast["Optimization"] == approx(0.99)    # 0.02 * 0.5 + 0.98 * 1
    assert t.slow["Optimization"] == approx(0.925)   # 0.15 * 0.5 + 0.85 * 1
    assert t.gap("Optimization") == approx(0.25)     # 0.065 / (2 * 0.13)


def test_lp_tracker_skills_are_independent():
    t = LearningPotentialTracker()
    t.update("Optimization", 0.2)
    t.update("Causal Inference", 0.8)
    t.update("Optimization", 0.0)
    assert t.slow == approx({"Optimization": 0.03, "Causal Inference": 0.8})  # 0.15 * 0.2


# ---- masking, per-skill centring, role scale

def test_keep_designer_sample():
    assert keep_designer_sample("blend", 0.0)
    assert not keep_designer_sample("blend", -0.1)
    assert not keep_designer_sample("solve_rate", -1e-9)
    assert keep_designer_sample("regret_based", -0.5)   # the timeout penalty is the point


def test_designer_advantages_two_skills():
    # math mean 0.4, logic single sample -> 0; no std division
    assert designer_advantages([0.6, 0.2, 0.4], ["m", "m", "l"], 32.0) == approx([6.4, -6.4, 0.0])
    # interleaved: a mean 0.5, b mean 0.3
    x, skills = [1.0, 0.1, 0.0, 0.5], ["a", "b", "a", "b"]
    assert designer_advantages(x, skills, 2.0) == approx([1.0, -0.4, -1.0, 0.4])


def test_designer_advantages_degenerate():
    assert designer_advantages([], [], 32.0) == []
    assert designer_advantages([0.7, 0.7], ["m", "m"], 32.0) == approx([0.0, 0.0])
    with pytest.raises(ValueError):
        designer_advantages([0.1], ["m", "l"], 1.0)


def test_role_scale_paper_settings_and_cap():
    assert role_scale(192, 24, 4) == approx(32.0)     # games
    assert role_scale(192, 24, 8) == 50.0             # tool use 8B/30B: 64 -> capped
    assert role_scale(256, 16, 32) == 50.0            # tool use 4B: 512 -> capped
    assert role_scale(192, 24, 8, cap=100.0) == approx(64.0)
    assert role_scale(168, 24, 4) == approx(28.0)


def test_role_scale_without_designer_samples_and_bad_counts():
    assert role_scale(192, 0, 4) == 1.0               # officially: either count 0 -> 1.0
    assert role_scale(0, 24, 4) == 1.0
    with pytest.raises(ValueError):
        role_scale(-1, 24, 4)
    with pytest.raises(ValueError):
        role_scale(192, 24, 0)


# ---- the delayed scoring in one call

def test_score_designer_batch_blend():
    # raw [0.64, 0.0, 0.0]; math mean 0.32, logic alone; S = min(50, 192 / 3 * 4 = 256) = 50
    raw, adv = score_designer_batch("blend", [HARD, EASY, HUNG], num_agent=192, regen_interval=4)
    assert raw == approx([0.64, 0.0, 0.0])
    assert adv == approx([16.0, -16.0, 0.0])


def test_score_designer_batch_keeps_timeout_penalty_in_regret_based():
    timed_out = EnvOutcome("Mathematical Reasoning", [[0, 0]], [], step_timeout=True)
    # raw [0.75, 0.0, -0.5]: math mean (0.75 + 0 - 0.5) / 3 = 1/12; S = min(50, 24 / 3 * 4) = 32
    raw, adv = score_designer_batch("regret_based", [HARD, EASY, timed_out], num_agent=24,
                                    regen_interval=4)
    assert raw == approx([0.75, 0.0, -0.5])
    assert adv == approx([(0.75 - 1 / 12) * 32, (0 - 1 / 12) * 32, (-0.5 - 1 / 12) * 32])


def UNFLOORED(outcomes, tracker=None, **band):  # a forker's variant that can go negative
    return [0.5, -0.2, 0.1]


def test_score_designer_batch_masks_negative_samples(monkeypatch):
    # A forker's unfloored variant: negatives are dropped and S counts only the kept samples.
    monkeypatch.setitem(DESIGNER_REWARDS, "unfloored", UNFLOORED)
    raw, adv = score_designer_batch("unfloored", [HARD, EASY, HUNG], num_agent=8, regen_interval=4)
    assert raw == approx([0.5, -0.2, 0.1])
    # kept: HARD (math, alone) and HUNG (logic, alone) -> both centred to 0; S = 8 / 2 * 4 = 16
    assert adv[1] is None
    assert adv[0] == approx(0.0) and adv[2] == approx(0.0)


def test_score_designer_batch_masks_and_scales_over_kept(monkeypatch):
    monkeypatch.setitem(DESIGNER_REWARDS, "unfloored", UNFLOORED)
    same_skill = [HARD, HARD, HARD]
    raw, adv = score_designer_batch("unfloored", same_skill, num_agent=8, regen_interval=4)
    # kept 0.5 and 0.1 -> mean 0.3 -> +-0.2 * S, S = 8 / 2 * 4 = 16 (not 8 / 3 * 4)
    assert adv == [approx(3.2), None, approx(-3.2)]


def test_score_designer_batch_learning_potential_and_unknown_name():
    raw, adv = score_designer_batch("learning_potential", [HARD, EASY], num_agent=192, regen_interval=4,
                                    tracker=LearningPotentialTracker())
    assert raw == approx([0.375, 0.375])
    assert adv == approx([0.0, 0.0])   # same skill, equal x -> no designer gradient
    with pytest.raises(ValueError):
        score_designer_batch("nope", [HARD], num_agent=192, regen_interval=4)


def test_an_epoch_records_its_window_and_scores_to_outcomes():
    from types import SimpleNamespace
    from regret import Epoch
    samples = [SimpleNamespace(env_id="a", skill="Optimization", code="class AEnv: ..."),
               SimpleNamespace(env_id="b", skill="Logical Deduction", code="class BEnv: ...")]
    play = lambda env_id, reward: SimpleNamespace(env_id=env_id, reward=reward)
    epoch = Epoch(t0=4, samples=samples, hinted={"a": [play("a", 1.0), play("a", 1.0)]})
    epoch.record([play("a", 0.0), play("a", 1.0), play("other", 1.0)], hung=set())
    epoch.record([play("a", 0.0), play("a", 0.0)], hung={"b", "other"})
    a, b = epoch.outcomes()
    assert (a.window_rewards, a.hinted_rewards, a.step_timeout) == ([[0.0, 1.0], [0.0, 0.0]], [1.0, 1.0], False)
    assert [[p.reward for p in plays] for plays in a.window_plays] == a.window_rewards   # the plays themselves too
    assert (b.window_rewards, b.hinted_rewards, b.step_timeout) == ([[], []], [], True)
    assert epoch.timeouts == {"b"} and a.regret == 0.5     # R_hint 1 - R_0 0.5
    assert (a.code, a.sample, b.code) == ("class AEnv: ...", samples[0], "class BEnv: ...")   # what was written
