"""Work out what a word-scrambling machine does by feeding it words, then predict its outputs."""
import random
import re
import string
from typing import Tuple

LETTERS = string.ascii_lowercase


def transform(word, reverse, swap, shift):
    """Reverse (optional), then swap neighbouring letters pairwise (optional), then Caesar-shift.

    >>> transform("abcde", True, True, 1)   # edcba -> debca -> efcdb
    'efcdb'
    """
    chars = list(word[::-1] if reverse else word)
    if swap:
        for i in range(0, len(chars) - 1, 2):
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(LETTERS[(LETTERS.index(ch) + shift) % 26] for ch in chars)


class WordMachineEnv:
    """Hidden rule (reverse?, swap pairs?, shift 1-7); 'feed WORD' shows output; answer 3 challenges."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._rule, self._challenges, self._solved, self._log = (False, False, 1), ["abc"] * 3, 0, []
        self.reset()

    def _status(self, msg):
        log = "; ".join(self._log[-4:]) or "nothing fed yet"
        return (f"{msg}\nMachine log: {log}\nChallenge {self._solved + 1}/3: what does the machine print "
                f"for '{self._challenges[self._solved]}'? | Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{feed WORD} (lowercase letters, up to 12) or \\boxed{answer WORD}. "
                "Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._solved, self._log = 0, 0, []
        self._rule = (rng.random() < 0.5, rng.random() < 0.5, rng.randint(1, 7))
        self._challenges = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(5, 8))) for _ in range(3)]
        return self._status("A machine rewrites lowercase words with a fixed hidden rule built from "
                            "letter shifts and rearrangements. Feed it words to study it, then answer "
                            "three challenges. One wrong answer loses."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        if len(cmd) == 2 and cmd[0] == "feed" and re.fullmatch(r"[a-z]{1,12}", cmd[1]):
            out = transform(cmd[1], *self._rule)
            self._log.append(f"{cmd[1]} -> {out}")
            msg = f"The machine prints '{out}'."
        elif len(cmd) == 2 and cmd[0] == "answer":
            truth = transform(self._challenges[self._solved], *self._rule)
            if cmd[1] != truth:
                return f"Wrong: the machine prints '{truth}'. You lose.", 0.0, True, False, {}
            self._solved += 1
            if self._solved == 3:
                return "All three challenges answered. You win!", 1.0, True, False, {}
            msg = "Correct!"
        else:
            msg = "Unknown or missing command."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " Out of turns."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        answers = [transform(w, *self._rule) for w in self._challenges[self._solved:]]
        return "feed abcdef, " + ", ".join(f"answer {a}" for a in answers)

    def close(self):
        pass
