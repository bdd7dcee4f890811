import random
import re


class GreenhouseEnv:
    """Grow a seedling to height 12 by keeping soil moisture and light inside the growing band."""

    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns
        self.turn_count = 0
        self._rng = random.Random()
        self._moisture, self._light, self._height = 5, 5, 0
        self.reset()

    def _report(self, msg):
        return (f"{msg}\nMoisture {self._moisture}/10, light {self._light}/10, "
                f"height {self._height}/12, turn {self.turn_count}/{self.max_turns}.\n"
                "Commands: water, shade, open, wait. Reply as \\boxed{command}.")

    def reset(self, seed=None):
        self._rng = random.Random(seed)
        self.turn_count, self._height = 0, 0
        self._moisture, self._light = self._rng.randint(4, 7), self._rng.randint(4, 7)
        return self._report("A seedling grows one step on every turn that ends with moisture and "
                            "light both between 4 and 7. Grow it to height 12."), {}

    def step(self, action):
        self.turn_count += 1
        out_of_time = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{([^}]*)\}", action)
        effects = {"water": (3, 0), "shade": (0, -2), "open": (0, 2), "wait": (0, 0)}
        cmd = m.group(1).strip().lower() if m else ""
        if cmd not in effects:
            return self._report("Unknown or missing command."), 0.0, False, out_of_time, {}
        dm, dl = effects[cmd]
        self._moisture += dm - 1                           # the soil dries every turn
        self._light += dl + self._rng.choice([-1, 0, 1])   # clouds come and go
        if not (0 < self._moisture < 10 and 0 < self._light < 10):
            return "The seedling wilted. You lose.", 0.0, True, False, {}
        if 4 <= self._moisture <= 7 and 4 <= self._light <= 7:
            self._height += 1
        if self._height >= 12:
            return "The plant is fully grown. You win!", 1.0, True, False, {}
        if out_of_time:
            return self._report("The season is over."), 0.0, False, True, {}
        return self._report(f"You chose {cmd}."), 0.0, False, False, {}

    def solution(self):
        return ("Keep both readings between 4 and 7: water when moisture is 4 or less, shade when "
                "light is 7 or more, open when light is 4 or less, otherwise wait.")

    def close(self):
        pass
