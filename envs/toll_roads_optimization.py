"""Drive from town A to town F on the cheapest route; road tolls are hidden until scouted."""
import heapq
import random
import re
from typing import Tuple

TOWNS = "abcdef"


def cheapest(tolls, start="a", goal="f"):
    """Dijkstra over an undirected toll map {(x, y): cost} with x < y; returns (cost, path)."""
    frontier, done = [(0, start, [start])], set()
    while frontier:
        cost, town, path = heapq.heappop(frontier)
        if town == goal:
            return cost, path
        if town in done:
            continue
        done.add(town)
        for (x, y), toll in tolls.items():
            if town in (x, y):
                other = y if town == x else x
                heapq.heappush(frontier, (cost + toll, other, path + [other]))
    return None, []


class TollRoadsEnv:
    """Six towns, about eight roads with hidden tolls; 'scout X Y' reveals a toll, 'drive X' pays it."""

    def __init__(self, max_turns=18, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._tolls, self._known, self._town, self._spent, self._budget = {}, {}, "a", 0, 0
        self.reset()

    def _status(self, msg):
        roads = ", ".join(f"{x.upper()}-{y.upper()}" + (f" ({self._known[(x, y)]})" if (x, y) in self._known else "")
                          for x, y in sorted(self._tolls))
        return (f"{msg}\nRoads (known tolls in brackets): {roads}\nYou are in {self._town.upper()} | "
                f"Spent {self._spent} of budget {self._budget} | Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{scout X Y} (learn the toll of road X-Y) or \\boxed{drive X} "
                "(take the road to town X and pay). Reply with exactly one command inside \\boxed{...}.")

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._known, self._town, self._spent = 0, {}, "a", 0
        while True:  # resample until the fewest-roads routes all cost more than the cheapest route
            pairs = [(x, y) for i, x in enumerate(TOWNS) for y in TOWNS[i + 1:] if (x, y) != ("a", "f")]
            self._tolls = {pair: rng.randint(1, 9) for pair in sorted(rng.sample(pairs, 8))}
            cost, _ = cheapest(self._tolls)
            # A surcharge of 100 per road makes Dijkstra pick the cheapest of the fewest-roads routes.
            hop_cost, hop_path = cheapest({pair: 100 + toll for pair, toll in self._tolls.items()})
            if cost is not None and hop_cost - 100 * (len(hop_path) - 1) > cost:
                break
        self._budget = cost
        return self._status("Drive from town A to town F. Your budget equals the cost of the cheapest "
                            "route, so any detour or pricier road leaves you stranded (you lose as soon "
                            "as you overspend). Scouting is free but takes a turn."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().replace("-", " ").split() if m else []
        if len(cmd) == 3 and cmd[0] == "scout" and all(len(t) == 1 and t in TOWNS for t in cmd[1:]):
            road = (min(cmd[1:]), max(cmd[1:]))
            if road in self._tolls:
                self._known[road] = self._tolls[road]
                msg = f"Road {road[0].upper()}-{road[1].upper()} costs {self._tolls[road]}."
            else:
                msg = "There is no such road."
        elif len(cmd) == 2 and cmd[0] == "drive" and len(cmd[1]) == 1 and cmd[1] in TOWNS:
            road = (min(self._town, cmd[1]), max(self._town, cmd[1]))
            if road not in self._tolls:
                msg = f"No road from {self._town.upper()} to {cmd[1].upper()}."
            else:
                self._known[road] = self._tolls[road]
                self._spent += self._tolls[road]
                self._town = cmd[1]
                if self._spent > self._budget:
                    return f"You ran out of money in {self._town.upper()}. You lose.", 0.0, True, False, {}
                if self._town == "f":
                    return f"You reached F for {self._spent}, the cheapest route. You win!", 1.0, True, False, {}
                msg = f"You drive to {self._town.upper()} and pay {self._tolls[road]}."
        else:
            msg = "Unknown or missing command."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " Night falls before you arrive."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        _, path = cheapest(self._tolls)
        return ", ".join([f"scout {x} {y}" for x, y in sorted(self._tolls)] + [f"drive {t}" for t in path[1:]])

    def close(self):
        pass
