"""Find which treatment makes a plant bloom and which one blocks it, by running controlled trials."""
import random
import re
from typing import Tuple

FACTORS = ["water", "light", "heat", "compost", "music"]


class GreenhouseTrialsEnv:
    """Blooms iff the hidden cause is on and the hidden inhibitor is off; the old notebook is confounded."""

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._cause, self._inhibitor, self._notes, self._trials = "water", "light", [], []
        self.reset()

    def _blooms(self, on):
        return self._cause in on and self._inhibitor not in on

    def _describe(self, on, bloomed):
        return f"[{' + '.join(sorted(on)) or 'nothing'}] -> {'bloomed' if bloomed else 'no bloom'}"

    def _status(self, msg):
        trials = "; ".join(self._trials[-6:]) or "none yet"
        return (f"{msg}\nOld notebook: {'; '.join(self._notes)}\nYour trials: {trials} | "
                f"Turn {self.turn_count}/{self.max_turns}\nTreatments: {', '.join(FACTORS)}. Commands: "
                "\\boxed{trial T1 T2 ...} (only the listed treatments on; \\boxed{trial none} for none) "
                "or \\boxed{conclude CAUSE INHIBITOR} (one try). "
                "Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._trials = 0, []
        self._cause, self._inhibitor, decoy = rng.sample(FACTORS, 3)
        others = [f for f in FACTORS if f not in (self._cause, self._inhibitor, decoy)]
        # Last season the decoy was always given together with the cause, so the notebook alone
        # cannot tell them apart: only an intervention that separates them can.
        beds = [{self._cause, decoy} | {f for f in others if rng.random() < 0.5},
                {f for f in others + [self._inhibitor] if rng.random() < 0.5},
                {self._cause, decoy, self._inhibitor}]
        rng.shuffle(beds)
        self._notes = [self._describe(bed, self._blooms(bed)) for bed in beds]
        return self._status("One treatment makes the orchid bloom, and a different one stops it from "
                            "blooming even when the first is given. Every other treatment does nothing. "
                            "Run trials with any combination of treatments, then name the cause and the "
                            "inhibitor. A wrong conclusion loses."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().replace(",", " ").split() if m else []
        if cmd[:1] == ["trial"] and (cmd[1:] == ["none"] or (cmd[1:] and all(f in FACTORS for f in cmd[1:]))):
            on = {f for f in cmd[1:] if f in FACTORS}
            self._trials.append(self._describe(on, self._blooms(on)))
            msg = f"Trial result: {self._trials[-1]}."
        elif len(cmd) == 3 and cmd[0] == "conclude":
            if cmd[1:] == [self._cause, self._inhibitor]:
                return "Both right. The greenhouse is yours. You win!", 1.0, True, False, {}
            return (f"Wrong: {self._cause} causes blooming and {self._inhibitor} blocks it. You lose.",
                    0.0, True, False, {})
        else:
            msg = "Unknown or missing command, or unknown treatment."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " The season is over."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        return (f"trial {self._cause}, trial {self._cause} {self._inhibitor}, "
                f"conclude {self._cause} {self._inhibitor}")

    def close(self):
        pass
