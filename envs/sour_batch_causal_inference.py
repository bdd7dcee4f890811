"""Trace a contamination back through a brewery's process graph to the stage that caused it."""
import random
import re
from typing import Tuple

STAGES = ["well", "mill", "mash", "hops", "boil", "chill", "yeast", "ferment", "filter", "bottle"]


def upstream(parents, stage):
    """The stage itself and every stage that feeds into it, directly or indirectly."""
    seen, todo = set(), [stage]
    while todo:
        s = todo.pop()
        if s not in seen:
            seen.add(s)
            todo.extend(parents[s])
    return seen


class SourBatchEnv:
    """One hidden stage is contaminated and spoils everything downstream; sample stages, sanitize once."""

    def __init__(self, max_turns=14, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._parents, self._culprit, self._samples = {s: [] for s in STAGES}, "well", []
        self.reset()

    def _status(self, msg):
        flows = ", ".join(f"{p}->{s}" for s in STAGES for p in self._parents[s])
        samples = "; ".join(self._samples) or "none yet"
        return (f"{msg}\nProcess flows: {flows}\nSamples: {samples} | Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{sample STAGE} (is the product after STAGE sour?) or "
                "\\boxed{sanitize STAGE} (one try). Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._samples = 0, []
        self._parents = {s: [] for s in STAGES}
        for i, stage in enumerate(STAGES[1:], start=1):
            if i == 1 or rng.random() < 0.6:  # some stages are fresh inputs with nothing upstream
                self._parents[stage] = sorted(rng.sample(STAGES[max(0, i - 3):i], min(i, rng.randint(1, 2))))
        for i, stage in enumerate(STAGES[:-1]):  # every stage must eventually flow into the bottle
            if not any(stage in self._parents[s] for s in STAGES):
                self._parents[rng.choice(STAGES[i + 1:])].append(stage)
        self._culprit = rng.choice(STAGES)
        return self._status("Today's bottles taste sour. Exactly one stage of the brewery is "
                            "contaminated, and contamination spreads to every stage downstream of it "
                            "(along the flows). Find the stage where it starts and sanitize it. "
                            "Sanitizing the wrong stage loses."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        stage = cmd[1] if len(cmd) == 2 and cmd[1] in STAGES else None
        if stage and cmd[0] == "sample":
            sour = self._culprit in upstream(self._parents, stage)
            self._samples.append(f"{stage} {'sour' if sour else 'clean'}")
            msg = f"The sample after {stage} is {'sour' if sour else 'clean'}."
        elif stage and cmd[0] == "sanitize":
            if stage == self._culprit:
                return f"You sanitize the {stage}; the next batch is clean. You win!", 1.0, True, False, {}
            return f"The next batch is still sour: it was the {self._culprit}. You lose.", 0.0, True, False, {}
        else:
            msg = "Unknown or missing command, or unknown stage."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " The brewery closes for the day."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        return f"sample {self._culprit}, sanitize {self._culprit}"

    def close(self):
        pass
