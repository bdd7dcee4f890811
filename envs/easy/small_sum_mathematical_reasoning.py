"""The sum of two numbers from 1 to 4, in one reply: a game SmolLM2-135M wins sometimes, and can learn.

Its usual failure is a numbered list of working that the token limit cuts off (a reply that does not
end scores 0); a short direct answer wins. Of 32 plays before any training (T 0.6, top-p 0.95, top-k
20, 32 new tokens) it won 4 to 7; sums of two numbers from 1 to 9 were won 1 to 4 times in 32.
"""
import random
import re
from typing import Tuple

LIST_MARKER = re.compile(r"(?m)^\s*\d+[.)]\s")   # "1. " numbers a line, it answers nothing


class SmallSumEnv:
    """a + b with a, b in 1..4; one reply, read at once. It wins when the first number in it that is
    not an operand is the sum (never an operand here): a bare "5", "\\boxed{5}" and "1 + 4 = 5" all win
    against 1 + 4."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns, self.turn_count, self._pair = max_turns, 0, (1, 1)

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)   # private RNG: the global one is shared with other environments
        self.turn_count, self._pair = 0, (rng.randint(1, 4), rng.randint(1, 4))
        a, b = self._pair
        return f"What is {a} + {b}? Answer with the number only.", {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        a, b = self._pair
        numbers = [int(n) for n in re.findall(r"-?\d+", LIST_MARKER.sub(" ", str(action)))]
        answer = next((n for n in numbers if n not in (a, b)), None)
        if answer == a + b:
            return f"Correct: {a} + {b} = {a + b}. You win!", 1.0, True, False, {}
        return f"Wrong: {a} + {b} = {a + b}, not {answer}. You lose.", 0.0, True, False, {}

    def solution(self) -> str:
        return str(sum(self._pair))

    def close(self):
        pass
