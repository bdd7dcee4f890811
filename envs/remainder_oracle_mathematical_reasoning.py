"""Recover a hidden three-digit number from a few of its remainders (Chinese remainder theorem)."""
import random
import re
from typing import Tuple


class RemainderOracleEnv:
    """N in [100, 999] is hidden; 'mod K' reveals N mod K (three queries); one answer is allowed."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._secret, self._queries_left, self._known = 100, 3, {}
        self.reset()

    def _status(self, msg):
        known = ", ".join(f"N mod {k} = {r}" for k, r in sorted(self._known.items())) or "none yet"
        return (f"{msg}\nKnown: {known} | Queries left: {self._queries_left} | "
                f"Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{mod K} with K from 2 to 13, or \\boxed{answer N}. "
                "Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)  # private RNG: the global one is shared with other environments
        self.turn_count, self._queries_left, self._known = 0, 3, {}
        self._secret = rng.randint(100, 999)
        return self._status("An oracle hides a whole number N with 100 <= N <= 999. Each query "
                            "reveals the remainder of N divided by a modulus you choose. You have "
                            "three queries and one answer; a wrong answer loses."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        if len(cmd) == 2 and cmd[0] == "mod" and re.fullmatch(r"[0-9]{1,3}", cmd[1]):
            k = int(cmd[1])
            if not 2 <= k <= 13:
                msg = "The modulus must be between 2 and 13."
            elif self._queries_left == 0:
                msg = "The oracle is silent: no queries left. Answer now."
            else:
                self._queries_left -= 1
                self._known[k] = self._secret % k
                msg = f"The oracle says: N mod {k} = {self._known[k]}."
        elif len(cmd) == 2 and cmd[0] == "answer" and re.fullmatch(r"-?[0-9]{1,6}", cmd[1]):
            if int(cmd[1]) == self._secret:
                return f"Correct, N = {self._secret}. You win!", 1.0, True, False, {}
            return f"Wrong: N was {self._secret}. You lose.", 0.0, True, False, {}
        elif m is None:
            msg = "No command found. Wrap your command in \\boxed{...}."
        else:
            msg = "Unknown command. Use 'mod K' or 'answer N'."
        if self.turn_count >= self.max_turns:
            return self._status(msg + f" Out of turns; N was {self._secret}."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        # 9, 11 and 13 are pairwise coprime and 9*11*13 = 1287 > 900 candidates, so N is unique.
        return f"mod 9, mod 11, mod 13, answer {self._secret}"

    def close(self):
        pass
