"""The three ways to fork the method, each from a test file alone and through spade.py's own loop:
a knob whose value reaches every place that uses it (the turn cap), a third setting, a new designer
reward that reads what the episodes carry or what the designer wrote.

The runs are in-process (`spade.main`) with the real tiny model, except that designer prompts are
answered by `DesignerDouble`, a TEST DOUBLE that writes a fixed environment, so that environments pass
the gate and the designer's half of the loop (hints, hinted plays, regret, delayed scoring) runs.
"""
import json
import signal

import pytest

import designer
import regret
import spade
from backend import engine

FAST = ["--model", "tiny", "--seed", "0", "--max-new-tokens", "8", "--save-every", "100", "--num-envs", "2",
        "--plays-per-env", "2"]

# Passes the gate only if the run's turn cap reaches it: a play constructs it with max_turns (its cls()
# fails), the gate's own construction with 1000. Its first observation shows the cap a play gave it.
TURNS_ENV = '''```python
class TurnsEnv:
    def __init__(self, max_turns):
        assert max_turns in (1000, 10), f"constructed with max_turns={max_turns}"
        self.max_turns, self.turn_count = max_turns, 0

    def reset(self, seed=None):
        self.turn_count = 0
        return f"You have {self.max_turns} turns.", {}

    def step(self, action):
        self.turn_count += 1
        return "Again.", 0.0, False, self.turn_count >= self.max_turns, {}
```'''

COUNT_ENV = '''```python
class CountEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0

    def reset(self, seed=None):
        self.turn_count = 0
        return "Say one word.", {}

    def step(self, action):
        self.turn_count += 1
        return "Counted.", 1.0 if len(action) % 2 else 0.0, True, False, {}
```'''


class DesignerDouble:
    """TEST DOUBLE around the real engine: a prompt that `is_designer` answers with `code`; every other
    prompt (hints, the audit, the agent's turns) goes to the real tiny model. Records the designer prompts."""

    def __init__(self, inner, tokenizer, is_designer, code):
        self.inner, self.tokenizer, self.is_designer, self.code = inner, tokenizer, is_designer, code
        self.designer_prompts = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, params):
        texts = [self.tokenizer.decode(p) for p in prompts]
        ours = [self.is_designer(t) for t in texts]
        real = iter(self.inner.generate([p for p, mine in zip(prompts, ours) if not mine], params) if not all(ours) else [])
        eos = min(self.inner.eos_token_ids)
        out = []
        for text, mine in zip(texts, ours):
            if not mine:
                out.append(next(real))
                continue
            self.designer_prompts.append(text)
            ids = self.tokenizer.encode(self.code, add_special_tokens=False) + [eos]
            out.append(engine.Completion(ids, [-0.5] * len(ids), "stop"))
        return out


@pytest.fixture
def run_spade(monkeypatch):
    """spade.main(args) in this process with the designer double; returns (the double, the metrics lines)."""
    made = []
    real_make = engine.make_engine

    def run(args, out, is_designer, code):
        def make(model, tokenizer, *args, **kwargs):
            made.append(DesignerDouble(real_make(model, tokenizer, *args, **kwargs), tokenizer, is_designer, code))
            return made[-1]
        monkeypatch.setattr(engine, "make_engine", make)
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)
        try:
            spade.main([*FAST, "--out", str(out), *args])
        finally:   # the run's Ctrl-C handler is the run's, not pytest's
            signal.signal(signal.SIGINT, handlers[0]), signal.signal(signal.SIGUSR1, handlers[1])
        return made[-1], [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return run


def games_designer(text):
    return "designer of interactive text games" in text


def test_the_turn_cap_reaches_the_designer_prompt_the_gate_and_the_plays(run_spade, tmp_path):
    double, metrics = run_spade(["--steps", "1", "--max-turns", "10", "--corpus", "none"], tmp_path / "run",
                                games_designer, TURNS_ENV)
    assert double.designer_prompts and all("__init__(self, max_turns=10, **kwargs)" in p and "roughly 5 to 7 turns" in p
                                           for p in double.designer_prompts)
    assert metrics[0]["designer/valid_rate"] == 1.0          # the gate constructed it as a play with 10
    plays = json.loads((tmp_path / "run" / "samples" / "step_00000" / "plays.json").read_text())
    turns_plays = [p for p in plays if p["env_id"].startswith("game_")]
    assert turns_plays and all("You have 10 turns." in p["transcript"][0]["content"] for p in turns_plays)


def test_a_third_setting_from_a_test_file_runs_a_step(run_spade, tmp_path, monkeypatch):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(json.dumps({"game_file": "count_seed", "skill": "Counting",
                                 "code": COUNT_ENV.removeprefix("```python\n").removesuffix("```")}) + "\n")

    def toy_messages(skill, document, memory_block, rng, *, max_turns, difficulty="medium"):
        return [{"role": "user", "content": f"TOY DESIGNER: write a {skill} game of at most {max_turns} turns.\n"
                                            f"{memory_block}"}]
    toy = designer.Setting({"Counting": "count things"}, toy_messages, "TOY HINTS: write a hint.",
                           values=dict(designer_reward="solve_rate"), seeds=str(seeds), embedded_skills="Counting")
    monkeypatch.setitem(spade.SETTINGS, "toy", toy)
    double, metrics = run_spade(["--setting", "toy", "--steps", "2", "--num-envs", "3"], tmp_path / "run",
                                lambda text: "TOY DESIGNER" in text, COUNT_ENV)
    assert double.designer_prompts and all("write a Counting game of at most 3 turns" in p for p in double.designer_prompts)
    assert metrics[0]["designer/valid_rate"] == 1.0 and metrics[1]["designer/samples"] == 3
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["setting"], config["skills"], config["designer_reward"]) == ("toy", "Counting", "solve_rate")
    memory = json.loads((tmp_path / "run" / "env_memory.json").read_text())
    assert {r["game_file"] for r in memory} >= {"count_seed"}            # the seed environment seeded memory
    hint_record = json.loads(next((tmp_path / "run" / "samples" / "step_00000").glob("game_*.json")).read_text())
    assert hint_record["skill"] == "Counting" and hint_record["hinted_transcript"]


def test_a_new_designer_reward_from_a_test_file_reads_the_episodes(run_spade, tmp_path, monkeypatch):
    seen = []

    def fewer_tokens(outcomes, tracker=None, *, lo=0.4, hi=0.6, ramp=0.25):
        """x = 1 / (1 + mean generated tokens of the epoch's plays): a signal only the episodes carry."""
        seen.extend(outcomes)
        plays = lambda o: [p for step in o.window_plays for p in step]
        return [1 / (1 + sum(p.num_generated_tokens for p in plays(o)) / max(1, len(plays(o)))) for o in outcomes]
    fewer_tokens.needs_hints = False
    monkeypatch.setitem(regret.DESIGNER_REWARDS, "fewer_tokens", fewer_tokens)
    _, metrics = run_spade(["--designer-reward", "fewer_tokens", "--steps", "2", "--num-envs", "2"], tmp_path / "run",
                           games_designer, COUNT_ENV)
    plays = [p for o in seen for step in o.window_plays for p in step]
    assert len(seen) == 2 and plays and all(p.tokens == [] and p.num_generated_tokens > 0 for p in plays)
    assert all(o.hinted_plays == [] for o in seen)                       # needs_hints False: no hinted plays
    expected = [1 / (1 + sum(p.num_generated_tokens for s in o.window_plays for p in s) /
                     sum(len(s) for s in o.window_plays)) for o in seen]
    assert metrics[-1]["designer/reward"] == pytest.approx(sum(expected) / 2)
    assert "time/hints" in metrics[0] and metrics[0]["time/hints"] < 0.5


def test_a_designer_reward_from_a_test_file_reads_the_code_and_the_designer_sample(run_spade, tmp_path, monkeypatch):
    seen = []

    def shorter(outcomes, tracker=None, *, lo=0.4, hi=0.6, ramp=0.25):
        """The paper's blend less 0.01 a line of the environment's code: a penalty on long environments."""
        seen.extend(outcomes)
        blended = regret.blend(outcomes, tracker, lo=lo, hi=hi, ramp=ramp)
        return [x - 0.01 * len(o.code.splitlines()) for x, o in zip(blended, outcomes)]
    shorter.keeps_negative = True
    monkeypatch.setitem(regret.DESIGNER_REWARDS, "shorter", shorter)
    _, metrics = run_spade(["--designer-reward", "shorter", "--steps", "2", "--num-envs", "2"], tmp_path / "run",
                           games_designer, COUNT_ENV)
    code = COUNT_ENV.removeprefix("```python\n").removesuffix("```")
    assert len(seen) == 2 and all(o.code.strip() == code.strip() for o in seen)
    assert all(o.sample.response_text.strip() == COUNT_ENV.strip() and o.sample.env_id for o in seen)
    expected = [x - 0.01 * len(code.strip().splitlines()) for x in regret.blend(seen, lo=0.4, hi=0.6, ramp=0.25)]
    assert metrics[-1]["designer/reward"] == pytest.approx(sum(expected) / 2)
