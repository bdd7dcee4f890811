"""Match four neighbours to four pets from written clues plus a few yes/no questions."""
import itertools
import random
import re
from typing import Tuple

PEOPLE = ["ana", "bo", "cy", "dee"]
PETS = ["cat", "dog", "fish", "bird"]


class PetOwnersEnv:
    """Hidden one-to-one pet assignment; clues prune it, 'ask' answers yes/no, 'solve' once."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._owner_of, self._clues, self._answers, self._questions_left = {}, [], [], 5
        self.reset()

    def _status(self, msg):
        answers = "; ".join(self._answers) or "none yet"
        return (f"{msg}\nClues: {' '.join(self._clues)}\nAnswers: {answers} | Questions left: "
                f"{self._questions_left} | Turn {self.turn_count}/{self.max_turns}\n"
                "Commands: \\boxed{ask PERSON PET} (yes/no: does PERSON own PET?) or "
                "\\boxed{solve PET_OF_ANA PET_OF_BO PET_OF_CY PET_OF_DEE} (one try). "
                "Reply with exactly one command inside \\boxed{...}.")

    @staticmethod
    def _holds(clue, assignment):
        kind, a, b, c = clue
        if kind == "not":           # person a does not own pet b
            return assignment[a] != b
        return assignment[b] == a or assignment[c] == a   # pet a belongs to person b or person c

    def _needs_two_questions(self, worlds):
        """True if no single yes/no question, answered truthfully, leaves only one assignment."""
        return all(sum((w[p] == pet) == (self._owner_of[p] == pet) for w in worlds) > 1
                   for p in PEOPLE for pet in PETS)

    def reset(self, seed=None) -> Tuple[str, dict]:
        rng = random.Random(seed)
        self.turn_count, self._answers, self._questions_left = 0, [], 5
        clues, worlds = [], []
        # Redraw until the clues leave 3-6 assignments and no single question settles the puzzle.
        while not (3 <= len(worlds) <= 6 and self._needs_two_questions(worlds)):
            pets = PETS[:]
            rng.shuffle(pets)
            truth = self._owner_of = dict(zip(PEOPLE, pets))
            worlds = [dict(zip(PEOPLE, p)) for p in itertools.permutations(PETS)]
            clues = []
            for _ in range(200):  # add true clues until 3 to 6 assignments remain
                if len(worlds) <= 6:
                    break
                if rng.random() < 0.5:
                    person = rng.choice(PEOPLE)
                    clue = ("not", person, rng.choice([p for p in PETS if p != truth[person]]), None)
                else:
                    pet = rng.choice(PETS)
                    owner = next(p for p in PEOPLE if truth[p] == pet)
                    other = rng.choice([p for p in PEOPLE if p != owner])
                    clue = ("either", pet, *sorted([owner, other]))
                left = [w for w in worlds if self._holds(clue, w)]
                if 3 <= len(left) < len(worlds):
                    worlds, clues = left, clues + [clue]
        self._clues = [f"{a.title()} does not own the {b}." if kind == "not"
                       else f"The {a} belongs to {b.title()} or {c.title()}." for kind, a, b, c in clues]
        return self._status("Four neighbours (Ana, Bo, Cy, Dee) each own exactly one different pet "
                            "(cat, dog, fish, bird). Use the clues and up to five yes/no questions, "
                            "then state the full matching. A wrong solution loses."), {}

    def step(self, action: str) -> Tuple[str, float, bool, bool, dict]:
        self.turn_count += 1
        m = re.search(r"\\boxed\{([^}]*)\}", str(action))
        cmd = m.group(1).strip().lower().split() if m else []
        if len(cmd) == 3 and cmd[0] == "ask" and cmd[1] in PEOPLE and cmd[2] in PETS:
            if self._questions_left == 0:
                msg = "No questions left. Solve now."
            else:
                self._questions_left -= 1
                reply = "yes" if self._owner_of[cmd[1]] == cmd[2] else "no"
                self._answers.append(f"{cmd[1].title()} owns the {cmd[2]}? {reply}")
                msg = f"Answer: {reply}."
        elif len(cmd) == 5 and cmd[0] == "solve":
            if cmd[1:] == [self._owner_of[p] for p in PEOPLE]:
                return "Every pet is matched correctly. You win!", 1.0, True, False, {}
            truth = ", ".join(f"{p.title()}={self._owner_of[p]}" for p in PEOPLE)
            return f"Wrong matching ({truth}). You lose.", 0.0, True, False, {}
        else:
            msg = "Unknown or missing command."
        if self.turn_count >= self.max_turns:
            return self._status(msg + " Out of turns."), 0.0, False, True, {}
        return self._status(msg), 0.0, False, False, {}

    def solution(self) -> str:
        return "solve " + " ".join(self._owner_of[p] for p in PEOPLE)

    def close(self):
        pass
