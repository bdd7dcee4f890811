"""Locate buried treasure on a grid from Manhattan-distance sonar pings, then dig once."""
import random
import re
from typing import Tuple


class SonarDigEnv:
    """Hidden cell on a 10x10 grid; 'ping R C' returns |R-r| + |C-c| (three pings); one dig."""

    SIZE = 10

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._treasure, self._pings_left, self._log = (0, 0), 3, []
        self.reset()

    def _status(self, msg):
        log = "; ".join(self._log) or "none yet"
        return (f"{msg}\nPings: {log} | Pings left: {self._pings_left} | "
                f"Turn {self.turn_count}/{self.max_turns}\n"
                f"Rows and columns are numbered 0 to {self.SIZE - 1}. Commands: \\boxed{{ping R C}} or "
                "\\boxed{dig R C} (one dig). Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._pings_left, self._log = 0, 3, []
        self._treasure = (rng.randrange(self.SIZE), rng.randrange(self.SIZE))
        return self._status(f"A chest is buried under one cell of a {self.SIZE}x{self.SIZE} beach. A "
                            "sonar ping from cell (R, C) reports the walking distance to the chest "
                            "(rows apart plus columns apart). You may ping three times and dig once."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().replace(",", " ").split() if m else []
        cell = None
        if len(cmd) == 3 and all(re.fullmatch(r"[0-9]{1,2}", x) for x in cmd[1:]):
            cell = (int(cmd[1]), int(cmd[2]))
            if not all(0 <= v < self.SIZE for v in cell):
                cell = None
        if cell and cmd[0] == "ping":
            if self._pings_left == 0:
                msg = "The sonar battery is empty. Dig now."
            else:
                self._pings_left -= 1
                dist = abs(cell[0] - self._treasure[0]) + abs(cell[1] - self._treasure[1])
                self._log.append(f"({cell[0]},{cell[1]}) -> {dist}")
                msg = f"Ping from ({cell[0]},{cell[1]}): distance {dist}."
        elif cell and cmd[0] == "dig":
            if cell == self._treasure:
                return "Your shovel hits the chest. You win!", 1.0, True, False, {}
            return f"Only sand. The chest was at {self._treasure}. You lose.", 0.0, True, False, {}
        else:
            msg = "Unknown or missing command, or a cell off the grid."
        if self.turn_count >= self.max_turns:
            return self._status(msg + f" Out of turns; the chest was at {self._treasure}."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        # From corners (0,0) and (0,N-1): d1 = r + c and d2 = r + (N-1-c) pin down r and c.
        r, c = self._treasure
        return f"ping 0 0, ping 0 {self.SIZE - 1}, dig {r} {c}"

    def close(self):
        pass
