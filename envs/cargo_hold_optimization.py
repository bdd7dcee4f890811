"""Pack the most valuable cargo that fits a weight limit; crate weights are only known once weighed."""
import itertools
import random
import re
from typing import Tuple

CRATES = ["amber", "brass", "cocoa", "dates", "ebony", "furs"]


def best_value(values, weights, capacity):
    """Highest total value of a subset whose total weight fits (brute force over 2^6 subsets)."""
    best = 0
    for mask in itertools.product([0, 1], repeat=len(values)):
        if sum(w for w, take in zip(weights, mask) if take) <= capacity:
            best = max(best, sum(v for v, take in zip(values, mask) if take))
    return best


class CargoHoldEnv:
    """Six crates with shown values and hidden weights; load a max-value set under the capacity, ship."""

    def __init__(self, max_turns=16, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._value, self._weight, self._capacity, self._best = {}, {}, 1, 1
        self._known, self._hold = {}, []
        self.reset()

    def _status(self, msg):
        crates = ", ".join(f"{c} (value {self._value[c]}, weight {self._known.get(c, '?')}"
                           f"{', loaded' if c in self._hold else ''})" for c in CRATES)
        load = sum(self._weight[c] for c in self._hold)
        return (f"{msg}\nCrates: {crates}\nHold: {load}/{self._capacity} kg, value "
                f"{sum(self._value[c] for c in self._hold)} | Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{weigh CRATE}, \\boxed{load CRATE}, \\boxed{unload CRATE}, \\boxed{ship}. "
                "Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._known, self._hold = 0, {}, []
        while True:  # resample until loading by value alone (ignoring weight) is not optimal
            self._value = {c: rng.randint(3, 20) for c in CRATES}
            self._weight = {c: rng.randint(2, 12) for c in CRATES}
            self._capacity = sum(self._weight.values()) * rng.randint(40, 60) // 100
            self._best = best_value([self._value[c] for c in CRATES],
                                    [self._weight[c] for c in CRATES], self._capacity)
            greedy, room = 0, self._capacity
            for c in sorted(CRATES, key=lambda c: -self._value[c]):
                if self._weight[c] <= room:
                    greedy, room = greedy + self._value[c], room - self._weight[c]
            if greedy < self._best:
                break
        return self._status("You are loading a small boat. Ship the most valuable cargo that stays "
                            "within the weight limit: shipping anything less than the best possible "
                            "value loses. A crate that would overload the hold is refused."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        crate = cmd[1] if len(cmd) == 2 and cmd[1] in CRATES else None
        load = sum(self._weight[c] for c in self._hold)
        if crate and cmd[0] == "weigh":
            self._known[crate] = self._weight[crate]
            msg = f"The {crate} crate weighs {self._weight[crate]} kg."
        elif crate and cmd[0] == "load":
            if crate in self._hold:
                msg = f"The {crate} crate is already loaded."
            elif load + self._weight[crate] > self._capacity:
                msg = f"Refused: the {crate} crate would overload the hold."
            else:
                self._hold.append(crate)
                msg = f"The {crate} crate is loaded."
        elif crate and cmd[0] == "unload":
            msg = f"The {crate} crate is unloaded." if crate in self._hold else "That crate is not loaded."
            self._hold = [c for c in self._hold if c != crate]
        elif cmd == ["ship"]:
            value = sum(self._value[c] for c in self._hold)
            if value == self._best:
                return f"Shipped cargo worth {value}, the best possible. You win!", 1.0, True, False, {}
            return f"Shipped cargo worth {value}; {self._best} was possible. You lose.", 0.0, True, False, {}
        else:
            msg = "Unknown or missing command, or unknown crate."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " The boat leaves without you."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        for mask in itertools.product([0, 1], repeat=len(CRATES)):
            chosen = [c for c, take in zip(CRATES, mask) if take]
            if (sum(self._weight[c] for c in chosen) <= self._capacity
                    and sum(self._value[c] for c in chosen) == self._best):
                return ", ".join([f"weigh {c}" for c in CRATES] + [f"load {c}" for c in chosen] + ["ship"])
        return "ship"

    def close(self):
        pass
