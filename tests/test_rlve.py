"""rlve.py: the fixed-RLVE baseline's curriculum by hand, problems from the real rlve-gym package, and
plays with a scripted engine (TEST DOUBLE, test_agent.ScriptedEngine) and with the tiny model."""
import random
import sys

import numpy as np
import pytest
import torch

from backend import engine
from backend import models
from baselines import rlve
from test_agent import ScriptedEngine


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_model("tiny", device="cpu")[1]


def test_all_sixteen_environments_make_problems_at_their_first_levels():
    environments, controllers = rlve.gym()
    assert set(rlve.ENVIRONMENTS) <= set(environments) & set(controllers) and len(rlve.ENVIRONMENTS) == 16
    curriculum = rlve.Curriculum()
    for name in rlve.ENVIRONMENTS:
        curriculum.top[name] = 2
        problem = curriculum.problem(name, random.Random(0))
        assert problem.name == name and 0 <= problem.level <= 2 and problem.prompt.strip()
    assert curriculum.next_seed >= 16


def test_levels_come_from_the_window_below_the_top():
    curriculum = rlve.Curriculum()
    rng = random.Random(1)
    assert {curriculum.problem("Multiplication", rng).level for _ in range(20)} == {0}
    curriculum.top["Multiplication"] = 6
    assert {curriculum.problem("Multiplication", rng).level for _ in range(60)} == {3, 4, 5, 6}   # WINDOW = 4
    # The level is the controller's: Multiplication's digit count is 2 at level 0 and grows by one.
    problem = curriculum.problem("Multiplication", rng)
    assert problem.verifiable.parameter["digit_num"] == 2 + problem.level


def test_the_top_moves_up_after_enough_plays_at_it_with_ninety_percent_right():
    curriculum = rlve.Curriculum()
    at = lambda level: rlve.Problem("Sorting", level, 0, "", None)
    curriculum.record(at(0), [1.0] * 100)
    assert curriculum.counted["Sorting"] == [100, 100] and curriculum.top["Sorting"] == 0
    curriculum.record(at(0), [1.0] * 15 + [0.0] * 13)       # 128 plays, 115 right: 89.8% < 90%
    assert curriculum.top["Sorting"] == 0 and curriculum.counted["Sorting"] == [0, 0]   # counted again
    curriculum.record(at(0), [1.0] * 116 + [0.0] * 12)      # 116 / 128 = 90.6%
    assert curriculum.top["Sorting"] == 1 and curriculum.counted["Sorting"] == [0, 0]
    curriculum.record(at(0), [1.0] * 200)                   # below the top: not counted
    assert curriculum.counted["Sorting"] == [0, 0]
    assert curriculum.metrics() == {"rlve/mean_top_level": 1 / 16, "rlve/max_top_level": 1}


def test_making_a_problem_is_seeded_and_leaves_the_global_generators_alone():
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    before = random.random(), np.random.rand(), torch.rand(1).item()
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    first = rlve.Curriculum().problem("SAT", random.Random(3))           # RLVE seeds all three
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == before
    again = rlve.Curriculum().problem("SAT", random.Random(3))
    assert (first.seed, first.level, first.prompt) == (again.seed, again.level, again.prompt)


def test_the_box_is_the_answer_and_the_reward_is_binary():
    problem = rlve.Curriculum().problem("Multiplication", random.Random(0))
    right = problem.verifiable.parameter["reference_answer"]
    assert problem.score(f"So the product is \\boxed{{{right}}}.") == 1.0
    assert problem.score(f"\\boxed{{{right + 1}}}") == 0.0
    assert problem.score(f"<answer>{right}</answer>") == 1.0                     # no box: the reply as it is
    assert problem.score(f"<think>\\boxed{{{right}}}?</think> \\boxed{{{right + 1}}}") == 0.0   # after thinking
    assert problem.score("no answer") == 0.0                                     # wrong format: 0, not -1


def test_plays_share_one_problem_per_environment(tokenizer):
    curriculum, rng = rlve.Curriculum(), random.Random(0)
    problems = [curriculum.problem(name, rng) for name in ("Multiplication", "Sorting")]
    right = problems[0].verifiable.parameter["reference_answer"]
    scripted = ScriptedEngine(tokenizer, lambda prompt: f"\\boxed{{{right}}}" if "Sort" not in prompt else "\\boxed{1}")
    stats = {}
    episodes = rlve.play(problems, scripted, tokenizer, 3, params=engine.SamplingParams(), max_new_tokens=32,
                         stats=stats)
    assert scripted.calls == [(6, 32)] and stats["num_episodes"] == 6
    assert [e.env_id for e in episodes] == [problems[0].group] * 3 + [problems[1].group] * 3
    assert [e.reward for e in episodes] == [1.0] * 3 + [0.0] * 3
    for e, problem in zip(episodes, [problems[0]] * 3 + [problems[1]] * 3):
        prompt = e.loss_mask.index(1)
        assert problem.prompt in tokenizer.decode(e.tokens[:prompt]) and "\\boxed{}" in tokenizer.decode(e.tokens[:prompt])
        assert e.loss_mask == [0] * prompt + [1] * (len(e.tokens) - prompt) and e.status == "terminated"
        assert e.logprobs[prompt:] == [-0.001 * (i + 1) for i in range(len(e.tokens) - prompt)]


def test_a_round_divided_over_ranks_plays_what_one_rank_plays(tokenizer):
    # launch.divide as four ranks would run it in one process: each plays its share (2 plays of 2
    # problems: ranks 0-1 get the first problem only, 2-3 the second), gathered in order. The budget is
    # the whole round's: the context leaves 5 tokens after the longer prompt, whichever a rank plays.
    from backend.launch import share

    def four_ranks(sizes, work):
        shares = [share(sizes, r, 4) for r in range(4)]
        ordered = [None] * len(sizes)
        for mine, part in zip(shares, [work(mine) for mine in shares]):
            for i, episode in zip(mine, part):
                ordered[i] = episode
        return ordered
    names, rounds = ["Sorting", "Multiplication"], []
    problems = [rlve.Curriculum().problem(name, rng) for rng in [random.Random(4)] for name in names]
    longest = max(map(len, rlve._prompts(problems, tokenizer, False)[1]))
    for divide in (None, four_ranks):
        scripted = ScriptedEngine(tokenizer, lambda prompt: "\\boxed{1}" if "Sort" in prompt else "x" * (len(prompt) % 7))
        played = rlve.play_round(rlve.Curriculum(), names, random.Random(4), scripted, tokenizer, 2, divide,
                                 params=engine.SamplingParams(), max_new_tokens=1000,
                                 max_context=longest + rlve.CONTEXT_MARGIN + 5)
        rounds.append([(e.env_id, e.tokens, e.reward) for e in played])
        assert {budget for _, budget in scripted.calls} == {5}
    assert rounds[0] == rounds[1] and len(rounds[0]) == 4 and rounds[0][0][0] != rounds[0][2][0]


def test_the_tiny_model_plays_rlve_problems(tokenizer):
    model, _ = models.load_model("tiny", device="cpu")
    generator = engine.make_engine(model, tokenizer, kind="hf")
    problems = [rlve.Curriculum().problem("Division", random.Random(0))]
    episodes = rlve.play(problems, generator, tokenizer, 2, params=engine.SamplingParams(temperature=1.0, seed=0),
                         max_new_tokens=8)
    assert len(episodes) == 2 and all(e.num_generated_tokens <= 8 and e.reward in (0.0, 1.0) for e in episodes)
    assert all(len(e.tokens) == len(e.loss_mask) == len(e.logprobs) and e.loss_mask[0] == 0 for e in episodes)


def test_a_missing_rlve_gym_is_one_clear_error(monkeypatch):
    from spade import parse_config
    monkeypatch.setitem(sys.modules, "Gym", None)   # as if rlve-gym were not installed
    monkeypatch.setitem(sys.modules, "Gym.environments", None)
    with pytest.raises(ImportError, match="pip install rlve-gym"):
        rlve.gym()
    with pytest.raises(SystemExit, match="^spade.py: the RLVE baseline needs the rlve-gym package"):
        parse_config(["--rlve", "--model", "tiny"])
    assert parse_config(["--model", "tiny"]).rlve is False
