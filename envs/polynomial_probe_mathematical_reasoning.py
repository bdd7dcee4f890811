"""Learn a hidden quadratic from three evaluations, then predict its value far away."""
import random
import re
from typing import Tuple


class PolynomialProbeEnv:
    """f(x) = a*x^2 + b*x + c with hidden integer coefficients; 'eval x' three times, then answer f(T)."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._coeffs, self._target, self._evals_left, self._table = (1, 0, 0), 30, 3, {}
        self.reset()

    def _f(self, x):
        a, b, c = self._coeffs
        return a * x * x + b * x + c

    def _status(self, msg):
        table = ", ".join(f"f({x}) = {y}" for x, y in sorted(self._table.items())) or "none yet"
        return (f"{msg}\nMeasured: {table} | Evaluations left: {self._evals_left} | Target: f({self._target}) "
                f"| Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{eval X} (integer X from -20 to 20) or \\boxed{answer V}. "
                "Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._evals_left, self._table = 0, 3, {}
        a = rng.choice([k for k in range(-6, 7) if k != 0])
        self._coeffs = (a, rng.randint(-9, 9), rng.randint(-20, 20))
        self._target = rng.randint(25, 60)
        return self._status("A sealed machine computes a quadratic f(x) = a*x^2 + b*x + c with unknown "
                            "integer coefficients. You may evaluate it three times at small inputs, "
                            f"then you must state f({self._target}) exactly. One answer only."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        if len(cmd) == 2 and cmd[0] == "eval" and re.fullmatch(r"-?[0-9]{1,3}", cmd[1]):
            x = int(cmd[1])
            if not -20 <= x <= 20:
                msg = "The machine only accepts inputs from -20 to 20."
            elif self._evals_left == 0:
                msg = "The machine is locked: no evaluations left. Answer now."
            else:
                self._evals_left -= 1
                self._table[x] = self._f(x)
                msg = f"The machine prints f({x}) = {self._table[x]}."
        elif len(cmd) == 2 and cmd[0] == "answer" and re.fullmatch(r"-?[0-9]{1,9}", cmd[1]):
            truth = self._f(self._target)
            if int(cmd[1]) == truth:
                return f"Exactly right: f({self._target}) = {truth}. You win!", 1.0, True, False, {}
            return f"Wrong: f({self._target}) = {truth}. You lose.", 0.0, True, False, {}
        else:
            msg = "Unknown or missing command. Use \\boxed{eval X} or \\boxed{answer V}."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " Out of turns."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        # Second difference f(2) - 2 f(1) + f(0) = 2a; then b = f(1) - f(0) - a and c = f(0).
        return f"eval 0, eval 1, eval 2, answer {self._f(self._target)}"

    def close(self):
        pass
