"""Interview nine suspects; only the thief lies. Deduce the thief from their statements."""
import random
import re
from typing import Tuple

NAMES = ["ada", "ben", "cal", "dot", "eve", "fin", "gil", "hal", "ivy"]


def consistent_thieves(statements):
    """Suspects who could be the thief: every innocent's statement true, the thief's false.

    `statements` maps speaker -> (subject, claim) with claim "guilty" or "innocent".
    """
    found = []
    for thief in NAMES:
        if all(((subject == thief) == (claim == "guilty")) == (speaker != thief)
               for speaker, (subject, claim) in statements.items()):
            found.append(thief)
    return found


class LiarLineupEnv:
    """Interview suspects one per turn; innocents tell the truth, the thief lies; accuse once."""

    def __init__(self, max_turns=14, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._thief, self._statements, self._heard = NAMES[0], {}, {}
        self.reset()

    def _status(self, msg):
        heard = "; ".join(f"{s.title()}: '{self._say(s)}'" for s in self._heard) or "nobody yet"
        return (f"{msg}\nStatements so far: {heard}\nSuspects: {', '.join(n.title() for n in NAMES)} "
                f"| Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{interview NAME} or \\boxed{accuse NAME} (one accusation). "
                "Reply with exactly one command inside \\boxed{...}.")

    def _say(self, speaker):
        subject, claim = self._statements[speaker]
        return f"I am {claim}" if subject == speaker else f"{subject.title()} is {claim}"

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._heard = 0, {}
        while True:  # resample until all nine statements together single out the thief
            self._thief = rng.choice(NAMES)
            self._statements = {}
            for speaker in NAMES:
                subject = rng.choice(NAMES)
                honest = speaker != self._thief
                if subject == self._thief:
                    claim = "guilty" if honest else "innocent"
                else:
                    claim = "innocent" if honest else "guilty"
                self._statements[speaker] = (subject, claim)
            if consistent_thieves(self._statements) == [self._thief]:
                break
        return self._status("A necklace was stolen. Nine suspects each make one statement when "
                            "interviewed. Innocent suspects always tell the truth; the thief always "
                            "lies. Find the thief. A wrong accusation loses."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        if len(cmd) == 2 and cmd[0] == "interview" and cmd[1] in NAMES:
            self._heard[cmd[1]] = True
            msg = f"{cmd[1].title()} says: '{self._say(cmd[1])}'."
        elif len(cmd) == 2 and cmd[0] == "accuse" and cmd[1] in NAMES:
            if cmd[1] == self._thief:
                return f"{cmd[1].title()} confesses. You win!", 1.0, True, False, {}
            return f"Wrong: the thief was {self._thief.title()}. You lose.", 0.0, True, False, {}
        else:
            msg = "Unknown or missing command, or unknown suspect."
        if self.turn_count >= self.max_turns:
            return self._status(msg + f" Time is up; the thief was {self._thief.title()}."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        return ", ".join(f"interview {n}" for n in NAMES) + f", accuse {self._thief}"

    def close(self):
        pass
