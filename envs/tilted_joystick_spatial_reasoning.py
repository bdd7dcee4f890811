"""Fly a drone whose joystick is mounted at an unknown rotation (maybe mirrored) onto a landing pad."""
import random
import re
from typing import Tuple

# Directions as (dx, dy) with x to the east and y to the north.
BASE = {"up": (0, 1), "right": (1, 0), "down": (0, -1), "left": (-1, 0)}


def orient(vector, quarter_turns, mirrored):
    """Rotate (dx, dy) clockwise by quarter_turns * 90 degrees, after an optional east-west mirror."""
    dx, dy = vector
    if mirrored:
        dx = -dx
    for _ in range(quarter_turns % 4):
        dx, dy = dy, -dx
    return dx, dy


class TiltedJoystickEnv:
    """9x9 field; each 'push' moves the drone one cell in a hidden rotated direction; land once."""

    SIZE = 9

    def __init__(self, max_turns=16, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._turns, self._mirrored, self._pos, self._pad = 0, False, (4, 4), (0, 0)
        self.reset()

    def _status(self, msg):
        return (f"{msg}\nDrone at (x={self._pos[0]}, y={self._pos[1]}) | Landing pad at "
                f"(x={self._pad[0]}, y={self._pad[1]}) | Turn {self.turn_count}/{self.max_turns}\n"
                "x grows to the east, y to the north, both from 0 to 8. Commands: \\boxed{push up}, "
                "\\boxed{push down}, \\boxed{push left}, \\boxed{push right}, \\boxed{land}. "
                "Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._pos = 0, (4, 4)
        self._turns, self._mirrored = rng.randrange(4), rng.random() < 0.5
        while True:
            self._pad = (rng.randrange(self.SIZE), rng.randrange(self.SIZE))
            if abs(self._pad[0] - 4) + abs(self._pad[1] - 4) >= 4:
                break
        return self._status("Your drone's joystick was bolted on at an unknown angle (a multiple of "
                            "90 degrees) and possibly mirrored, so 'up' may not move north. The drone "
                            "reports its position after every push. Land exactly on the pad: landing "
                            "anywhere else crashes the drone."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        if len(cmd) == 2 and cmd[0] == "push" and cmd[1] in BASE:
            dx, dy = orient(BASE[cmd[1]], self._turns, self._mirrored)
            x, y = self._pos[0] + dx, self._pos[1] + dy
            if 0 <= x < self.SIZE and 0 <= y < self.SIZE:
                self._pos = (x, y)
                msg = f"The drone moves to (x={x}, y={y})."
            else:
                msg = "The drone bumps into the fence and stays put."
        elif cmd == ["land"]:
            if self._pos == self._pad:
                return "A perfect landing on the pad. You win!", 1.0, True, False, {}
            return "The drone lands off the pad and crashes. You lose.", 0.0, True, False, {}
        else:
            msg = "Unknown or missing command."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " The battery is empty."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        # Press the buttons whose rotated moves point east/west and north/south toward the pad.
        button_for = {orient(v, self._turns, self._mirrored): name for name, v in BASE.items()}
        dx, dy = self._pad[0] - 4, self._pad[1] - 4
        moves = [f"push {button_for[(1 if dx > 0 else -1, 0)]}"] * abs(dx)
        moves += [f"push {button_for[(0, 1 if dy > 0 else -1)]}"] * abs(dy)
        return ", ".join(moves + ["land"])

    def close(self):
        pass
