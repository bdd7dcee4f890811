"""Both roles learn through the whole loop: spade.py's own steps with the toy setting (toy/), where a
designer sample goes through the gate, hints, hinted plays, regret, the delayed scoring and the update.

The model is the tiny one taught the toy's behaviours (toy.teach): no test double answers anything.
Two spies wrap real functions and call them: `regret.score_designer_batch` (what each designer sample
was scored on, and its reward) and `grpo.update` (what reached the loss).
"""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import designer
import grpo
import regret
import spade
import toy
from backend import models

# make test spreads tests over processes (pytest-xdist): these share one taught model, so one process
pytestmark = pytest.mark.xdist_group("toy")

STEPS = 6
ROOT = Path(__file__).resolve().parents[1]


def plateau(w, lo=0.4, hi=0.6, ramp=0.25):   # METHOD 6.3, written out again for the check
    return max(0.0, 1 - (lo - w) / ramp) if w < lo else max(0.0, 1 - (w - hi) / ramp) if w > hi else 1.0


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    return toy.taught_model(tmp_path_factory.mktemp("toy") / "taught-model")   # where toy.main looks


def toy_run(taught, out, monkeypatch, *flags):
    """The toy run for STEPS steps with both spies; returns (scored, updates, metrics)."""
    scored, updates = [], []
    real_score, real_update = regret.score_designer_batch, grpo.update

    def score(variant, outcomes, **kwargs):
        raw, advantages = real_score(variant, outcomes, **kwargs)
        scored.append((outcomes, raw, advantages))
        return raw, advantages

    def update(model, optimizer, samples, **kwargs):
        updates.append([(tuple(s.tokens), s.advantage) for s in samples])
        return real_update(model, optimizer, samples, **kwargs)
    monkeypatch.setattr(regret, "score_designer_batch", score)
    monkeypatch.setattr(grpo, "update", update)
    monkeypatch.setitem(spade.SETTINGS, "toy", toy.SETTING)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)
    try:
        spade.main(["--model", str(taught), *toy.ARGS, "--steps", str(STEPS), "--out", str(out), *flags])
    finally:
        signal.signal(signal.SIGINT, handlers[0]), signal.signal(signal.SIGUSR1, handlers[1])
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return scored, updates, metrics


def designer_choice(model, tokenizer):
    """The designer's preference among what it was taught to write, at temperature 1: each answer's
    probability (the whole response, teacher-forced) over the four's total."""
    prompt = designer.encode_chat(tokenizer, toy.designer_messages(toy.SKILL, None, "", None, max_turns=1))[1]
    answers = {**toy.GAMES, "broken": toy.BROKEN}
    logps = []
    with torch.no_grad():
        for code in answers.values():   # len(reply) times the reply's mean negative log-likelihood
            reply = tokenizer.encode(f"```python\n{code}```", add_special_tokens=False) + [tokenizer.eos_token_id]
            ids = torch.tensor([prompt + reply])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
            logps.append(-len(reply) * torch.nn.functional.cross_entropy(logits, ids[0, len(prompt):]).item())
    return dict(zip(answers, torch.softmax(torch.tensor(logps), 0).tolist()))


def final_choice(out):
    checkpoint = json.loads((out / "latest").read_text())["checkpoint"]
    return designer_choice(*models.load_model(str(out / checkpoint / "model")))


@pytest.mark.slow
def test_the_designer_learns_to_write_the_game_a_hint_helps_in(taught, tmp_path, monkeypatch):
    before = designer_choice(*models.load_model(str(taught)))
    scored, updates, metrics = toy_run(taught, tmp_path / "run", monkeypatch)
    # 1. Each designer sample's reward is the blend of what the agent did in its environment: the win
    #    rate over the epoch's plays, and the hinted plays' mean against the regen step's (METHOD 6.3).
    outcomes = [(o, x) for batch, raw, _ in scored for o, x in zip(batch, raw)]
    assert len(outcomes) >= 4 * (STEPS - 1)
    for o, x in outcomes:
        plays = [p.reward for step in o.window_plays for p in step]
        hinted, first = [p.reward for p in o.hinted_plays], [p.reward for p in o.window_plays[0]]
        w, r_hint, r_0 = sum(plays) / len(plays), sum(hinted) / len(hinted), sum(first) / len(first)
        assert x == pytest.approx(0.6 * plateau(w) + 0.4 * min(1.0, max(0.0, (r_hint - r_0) / 0.15)))
    # The hint helps in some environments (regret > 0) and not in others: both kinds were scored.
    regrets = [o.regret for o, _ in outcomes]
    assert max(regrets) >= 0.25 and min(regrets) <= 0.0
    # 2. Their advantages reach the loss: every kept designer sample is in the next update's batch.
    # The epoch of step t is scored at t + 1 (R = 1), and the last step's at once.
    for epoch, (_, _, advantages) in enumerate(scored):
        trained = [a for _, a in updates[min(epoch + 1, STEPS - 1)]]
        assert all(any(a == pytest.approx(b) for b in trained) for a in advantages if a is not None)
    assert sum(a != 0 for _, _, advantages in scored for a in advantages if a is not None) >= STEPS
    assert all(m["grpo/num_samples"] > m["agent/samples"] for m in metrics[1:])
    # 3. The designer writes the game a hint helps in more often: the blend pays 1.0 for it, 0 for the others.
    after = final_choice(tmp_path / "run")
    assert after["hint_game"] >= 0.6 and after["hint_game"] > before["hint_game"] + 0.3, (before, after)
    assert metrics[-1]["designer/regret"] > metrics[0]["designer/regret"]


@pytest.mark.slow
def test_a_second_toy_run_is_a_run_of_its_own_and_a_toy_run_resumes(taught):
    # `python -m toy` twice, as `make demo-toy` twice, then `python -m toy --resume DIR --steps 2`; the
    # taught model beside the runs is reused.
    def toy_command(*args):
        result = subprocess.run([sys.executable, "-m", "toy", *args], cwd=ROOT, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0 and "teaching" not in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    for _ in range(2):
        toy_command("--out", str(taught.parent / "{time}"), "--steps", "1")
        time.sleep(1.1)                                      # {time} counts seconds
    runs = sorted(p for p in taught.parent.iterdir() if p.name != "taught-model")
    assert len(runs) == 2 and all((run / "latest").is_file() for run in runs)
    toy_command("--resume", str(runs[0]), "--steps", "2")
    assert [json.loads(line)["step"] for line in (runs[0] / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    hints = [json.loads(p.read_text())["hint"] for p in (runs[0] / "samples").glob("step_*/game_*.json")]
    assert hints and sum(hint == toy.HINT for hint in hints) >= len(hints) / 2   # as taught, not random text


@pytest.mark.slow
def test_without_designer_training_the_designer_does_not_move(taught, tmp_path, monkeypatch):
    before = designer_choice(*models.load_model(str(taught)))
    scored, updates, metrics = toy_run(taught, tmp_path / "run", monkeypatch, "--no-designer-training")
    assert scored and all(len(batch) == m["agent/samples"] for batch, m in zip(updates, metrics))   # agent only
    after = final_choice(tmp_path / "run")
    assert all(abs(after[name] - before[name]) < 0.02 for name in before), (before, after)
