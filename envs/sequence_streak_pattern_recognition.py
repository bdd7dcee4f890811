"""Spot the rule behind a number sequence and predict its next three terms."""
import random
import re
from typing import Tuple


def make_sequence(rng, length):
    """A sequence from one of six rule families, each fixed by the previous one or two terms."""
    family = rng.choice(["step", "ratio", "square", "sum", "zigzag", "double"])
    if family == "step":
        a, d = rng.randint(1, 40), rng.choice([-9, -7, -5, -3, 3, 4, 6, 7, 8, 9, 11, 12])
        return [a + d * n for n in range(length)]
    if family == "ratio":
        a, r = rng.randint(1, 6), rng.choice([2, 3])
        return [a * r ** n for n in range(length)]
    if family == "square":
        a, b, c = rng.randint(-5, 10), rng.randint(-6, 6), rng.randint(1, 3)
        return [a + b * n + c * n * n for n in range(length)]
    # A start of 4+ with k >= -3 keeps x -> 2x + k from being a constant sequence.
    seq = [rng.randint(4, 9)] + ([rng.randint(1, 9)] if family == "sum" else [])
    p, q, k = rng.randint(-4, 9), rng.randint(-4, 9), rng.choice([-3, -2, -1, 1, 2, 3])
    while p == q:
        q += 1
    while len(seq) < length:
        if family == "sum":
            seq.append(seq[-1] + seq[-2])
        elif family == "zigzag":
            seq.append(seq[-1] + (p if len(seq) % 2 else q))
        else:
            seq.append(2 * seq[-1] + k)
    return seq


class SequenceStreakEnv:
    """Three terms shown; 'reveal' shows one more; 'guess V' predicts the next; two wrong guesses lose."""

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._sequence, self._shown, self._correct, self._lives = [0] * 12, 3, 0, 2
        self.reset()

    def _status(self, msg):
        terms = ", ".join(str(v) for v in self._sequence[:self._shown])
        return (f"{msg}\nSequence: {terms}, ? | Correct guesses: {self._correct}/3 | Lives: {self._lives} "
                f"| Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{reveal} (show the next term) or \\boxed{guess V} (predict it). "
                "Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._shown, self._correct, self._lives = 0, 3, 0, 2
        self._sequence = make_sequence(rng, 40)  # more terms than any 25-turn game can reach
        return self._status("A hidden rule generates a sequence of integers; each term follows from the "
                            "one or two before it. Predict three upcoming terms correctly to win. "
                            "Revealing a term costs a turn; a wrong guess costs a life."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        nxt = self._sequence[min(self._shown, len(self._sequence) - 1)]
        if cmd == ["reveal"]:
            self._shown += 1
            msg = f"The next term is {nxt}."
        elif len(cmd) == 2 and cmd[0] == "guess" and re.fullmatch(r"-?[0-9]{1,20}", cmd[1]):
            self._shown += 1
            if int(cmd[1]) == nxt:
                self._correct += 1
                if self._correct == 3:
                    return f"Correct, {nxt}. Three right: you win!", 1.0, True, False, {}
                msg = f"Correct, the term is {nxt}."
            else:
                self._lives -= 1
                if self._lives == 0:
                    return f"Wrong, it was {nxt}. No lives left: you lose.", 0.0, True, False, {}
                msg = f"Wrong, it was {nxt}."
        else:
            msg = "Unknown or missing command."
        self._shown = min(self._shown, len(self._sequence) - 1)
        if self.turn_count >= self.max_turns:
            return self._status(msg + " Out of turns."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        later = self._sequence[self._shown + 3:self._shown + 6]
        return "reveal, reveal, reveal, " + ", ".join(f"guess {v}" for v in later)

    def close(self):
        pass
