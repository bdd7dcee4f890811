"""The texts the designer and the hint writer are given: our own wording of METHOD.md 1.2, 1.3, 2 and 5.

designer.py assembles these into chat messages (which text goes where, with which document, skill
and memory block); this file holds only text and two small tables, so that the prompts can be read
and edited in one place without touching the logic. Nothing parses these strings except the model.

The wording is new (the official prompt text is not copied); what each text must carry is what
METHOD.md lists: the interactive `\\boxed{}` contract of games (1.2 A and B), the `ToolUseBaseEnv`
multi-instruction contract of tool use (1.3), the skill/difficulty footer (2.2), the ten tool-use
domains and four task variants (2.2), the two hint-writer instructions (5), and the solvability
audit of tool-use environments (3.1 step 4).
"""

# --- Games (METHOD 1.2, 2.1): the system message shared by the corpus and no-corpus prompts ---------
GAME_DESIGNER_SYSTEM = """\
You are an experienced Python programmer and a designer of interactive text games that last many \
turns. In your games every move changes the state of the world, information is uncovered by acting, \
and winning takes a plan carried out over several turns. You answer with one complete, runnable \
Python class."""

# (A) with a corpus document: the document goes between these two lines.
CORPUS_GAME_HEADER = """\
Study the reference document below. Choose one concept, mechanism or procedure from it and build an \
interactive multi-turn game in which the player has to use that idea."""

CORPUS_GAME_CONTRACT = """## What to build
One Python class whose name ends in `Env` (for example `TideLockEnv`; no other top-level name may \
end in `Env`). The player interacts with it over several turns:
- Every turn the player sends exactly one command written as \\boxed{<command>}. `step` takes the \
command out with the regular expression r"\\\\boxed\\{(.+?)\\}" (when nothing matches, it uses the raw \
action text) and applies it as a move that changes the game state. A command is an action in the \
world, never a final answer to a quiz.
- Reaching the goal must need a sequence of actions. Part of the state is hidden at the start and \
becomes known only through what the player does.
- Every observation shows the updated state, the commands available, and a reminder of the reply \
format.

## Interface
- `__init__(self, max_turns=12, **kwargs)`: create every attribute the class uses, then call \
`self.reset()`.
- `reset(self, seed=None) -> tuple[str, dict]`: set `self.turn_count = 0`, draw the hidden state and \
the goal from `random.Random(seed)`, and return (the situation + the available commands + the reply \
format, {}).
- `step(self, action: str) -> tuple[str, float, bool, bool, dict]`: add one to `self.turn_count`, set \
`truncated = self.turn_count >= self.max_turns`, parse the command, update the state, and return \
(observation, reward, terminated, truncated, {}).
- `solution(self) -> str`: a sequence of commands that reaches the goal from the current hidden state.
- `close(self)`: may simply `pass`.

## Rewards
Rewards lie between 0 and 1. Return 1.0 together with terminated=True only when the goal is reached. \
Partial progress may score less than 1.0, but only the reward of the step that ends the game counts. \
Running out of turns ends the game with truncated=True.

## Robustness
- Inside f-strings, literal braces must be doubled: f"\\\\boxed{{move}}", not f"\\\\boxed{move}".
- Create all attributes in `__init__` before `reset()` is called.
- Standard library only (`math`, `random`, `re`, `collections`, ...): no `input()`, no files, no network.
- Malformed, empty or nonsense commands must never crash the game; reply with a reminder of the \
format instead.
- Never divide by zero.
- Never assign to `self.solution` (it is a method).
- Use the idea from the document, but never mention the document, its title or its author in the game.

## Check before answering
In your head, call `reset(seed=0)`, then play two different command sequences: the observations must \
differ, and following `solution()` must win.

Answer with the complete class in a single ```python code block."""

# easy asks for fewer interactions than medium/hard (METHOD 2.2).
GAME_FOOTER = """\
TARGET SKILL: {skill} ({description})
The game must exercise this skill.
DIFFICULTY: {difficulty}
Reaching the goal must take at least {min_steps} interactions with the game."""

# (B) without a corpus: the multi-turn contract plus one complete game of our own.
NO_CORPUS_GAME_CONTRACT = """Design a new interactive multi-turn text game that trains this skill: \
{skill} ({description}).

Directions you could take (start from one of them or invent your own):
{ideas}

## Interface
One Python class whose name ends in `Env` (no other top-level name may end in `Env`):
- `__init__(self, max_turns={max_turns}, **kwargs)`: create every attribute, then call `self.reset()`.
- `reset(self, seed=None) -> tuple[str, dict]`: draw all randomness from a private \
`random.Random(seed)` kept on the instance; return (the first observation, {{}}).
- `step(self, action: str) -> tuple[str, float, bool, bool, dict]`: find the command with \
r"\\\\boxed\\{{([^}}]*)\\}}". Without one, return a reminder of the format with reward 0.0 and the game \
not over. A win returns 1.0 with terminated=True; a loss returns 0.0 with terminated=True; every \
other turn returns 0.0. When `max_turns` is reached, return 0.0 with truncated=True.
- `solution(self) -> str` describing how to win, and `close(self)`.

## What makes a good game here
- The state changes after every action.
- Every turn offers at least two choices that matter.
- Good play wins in roughly {min_turns} to {max_good_turns} turns; random commands lose.
- Standard library only; never call `input()`.

## Reference game
This complete game shows the format only. Yours must be a different game with different mechanics.
```python
{reference_game}
```

Answer with the complete class in a single ```python code block."""

REFERENCE_GAME = r'''import random
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
        pass'''

# --- Tool use (METHOD 1.3, 2.1, 2.2): a single user message, no system message ----------------------
TOOL_DOMAINS = [
    "retail orders (customers, orders, returns, refunds)",
    "travel booking (flights, hotels, reservations)",
    "telecom accounts (plans, lines, data add-ons, billing)",
    "banking and payments (accounts, transfers, cards)",
    "calendar and reminders (events, invitations, reminders)",
    "file system (folders, files, permissions)",
    "shopping cart (catalogue, cart, coupons, checkout)",
    "customer support (tickets, agents, CRM notes)",
    "smart home (rooms, devices, scenes, schedules)",
    "project tracker (projects, tasks, assignees, statuses)",
]

# The variant multiset {execute x3, read_then_write x2, miss_param x1, irrelevant x1} (METHOD 2.2).
TOOL_VARIANTS = ["execute"] * 3 + ["read_then_write"] * 2 + ["miss_param", "irrelevant"]
TOOL_VARIANT_TEXT = {
    "execute": "a direct task: each instruction can be carried out with the right tool and arguments.",
    "read_then_write": "the assistant must first read some state, branch on a condition found there "
                       "(for example: refund only if the order was shipped), and then write.",
    "miss_param": "one instruction omits a value that a tool needs; the assistant must discover it "
                  "with a lookup tool, and a wrong guess must make the tool return an error.",
    "irrelevant": "exactly one instruction asks for something no tool can do. Provide a tool "
                  "`decline_request(reason)`; that instruction's criterion becomes true only once it "
                  "has been called.",
}

TOOL_TASK = """\
Design a multi-turn tool-use environment in Python. An assistant works through it for a simulated \
user, who gives short instructions one after another; the assistant carries each one out by calling \
the tools you define.

DOMAIN: {domain}. Stay inside this domain."""

TOOL_SNIPPET_NOTE = """\
The snippet below is optional flavour: borrow names or details from it if they fit the domain, \
otherwise ignore it."""

TOOL_SKILL = """\
SKILL: {skill} ({description})
Example tasks for this skill:
{ideas}
TASK VARIANT: {variant}: {variant_text}
DIFFICULTY: {difficulty}"""

TOOL_CONTRACT = """## The base class
Your class subclasses `ToolUseBaseEnv`, which already exists in the namespace: do NOT import or \
define it. It provides:
- `__init__(self, max_turns=10, **kwargs)`: sets `turn_count`, `_tools = {}`, `_state = {}`, \
`_call_history = []`, `_expected_answer = None`, then calls `self.reset()`.
- `get_tools()`: turns `self._tools = {name: {"description": str, "parameters": <JSON schema>}}` \
into function schemas for the assistant.
- `execute_tool(name, args)`: calls your method `tool_<name>(**args)`; unknown tools and exceptions \
come back as errors.
- `step(action)`: checks an `<answer>...</answer>` with `self._check_answer(answer)` (reward 1.0 and \
the episode ends when it is right); otherwise runs a `<tool_call>{json}</tool_call>`; otherwise \
replies with a format reminder.

## What you write
- `reset(self, seed=None) -> tuple[str, dict]`: all randomness happens here, from \
`random.Random(seed)`. Fill `self._state` with the domain data and `self._tools` with 3 to 8 tools \
(at least one parameter that is required or restricted by an enum, and one or two plausible tools \
the task does not need). Also set:
  - `self._user_messages`: 3 to 5 short instructions, each one atomic step of the task;
  - `self._message_criteria`: one function per instruction, `state -> bool`, true once that \
instruction has been carried out;
  - `self._current_msg = 0` and `self._expected_answer = "done"`.
  Return (the first instruction only, {}).
- `_advance_if_done(self) -> str`: when the current instruction's criterion holds, move on and \
return a marker line with the next instruction (after the last one, a line asking the assistant to \
submit <answer>done</answer>); otherwise return "".
- One method `tool_<name>(self, ...) -> str` per tool, with parameter names exactly as in its schema, \
returning its result text + `self._advance_if_done()`. Tools are deterministic.
- `_check_answer(self, answer)`: true only for "done" once every instruction is complete.
- `solution(self) -> str`: the tool calls that complete every instruction, then <answer>done</answer>.

## Rules for the criteria
- Every criterion is false right after `reset`.
- Compare values of the same type (an id string with an id string, never with a number).
- Every value a criterion needs can be found out by the assistant through some tool.
- Some sequence of tool calls makes each criterion true.
- Each criterion checks exactly what its instruction asks for.

## Check before answering
Trace `reset(seed=0)` and then `solution()` step by step, and confirm that the criteria become true \
one after another.

Answer with the complete class in a single ```python code block."""

# --- Memory block (METHOD 2.2, 8) -------------------------------------------------------------------
MEMORY_INTRO = """\
Below are earlier environments that turned out well balanced for the player. Learn from their \
structure and level of complexity, but build something different."""
MEMORY_AVOID = "Avoid generating environments like:"

# --- Hints (METHOD 5, mode "self") ------------------------------------------------------------------
HINT_GAME_SYSTEM = """\
You will read the source code of a text game. Work out, from the player's side, what the puzzle is, \
how the winning moves follow from what `reset` sets up and how `step` responds, and in which format \
commands must be sent. Then write a hint of one to three sentences (under 100 words) that gives the \
key insight or strategy and the expected command format. Mention only things the player can see \
while playing. No generic advice such as "think carefully". Never state the exact answer or the \
hidden values. Reply with the hint only."""

HINT_TOOL_SYSTEM = """\
You will read the source code of a tool-use environment. Write a procedural plan of two or three \
sentences for an assistant who must complete its instructions: which kinds of tools to use in which \
phase, to handle one instruction at a time, to look arguments up with the lookup tools instead of \
guessing, to find or ask for values that are missing, to decline requests that no tool can serve, \
and to submit <answer>done</answer> only after the last instruction. Do not write concrete ids, \
names, paths, amounts or dates, and do not list the calls one by one. Reply with the hint only."""

HINT_USER = "Environment code:\n```python\n{code}\n```"

# --- The solvability audit of tool-use environments (METHOD 3.1 step 4; one user message) ----------
AUDIT_TOOL_USER = """\
SOLVABILITY AUDIT. Below is the source code of a tool-use environment: an assistant must carry out its \
instructions by calling its tools, and the criteria in the code decide whether each instruction is done. \
Decide whether the environment can be solved at all.
1. List every success criterion the code checks.
2. For each one, find tool calls, with arguments the assistant can know or look up, that produce the \
state it requires.
3. Reject only what is impossible: a required state that no tool reaches, criteria that contradict each \
other, a comparison between values of different types, a required field that no successful tool call \
writes, or a hidden value that nothing lets the assistant find out. Reject criteria that hold before \
any call only when most of the steps already hold at the start.
Keep environments that are hard but solvable, and random values that some tool reveals.

```python
{code}
```

End with your verdict: \\boxed{{yes}} if it can be solved, \\boxed{{no}} if it cannot."""

# --- Example ideas per skill (METHOD 2.2: 3-4 per skill; ours) --------------------------------------
# Games: multi-turn concepts, 3 of the 4 shown in the no-corpus prompt (the corpus prompt shows none).
GAME_SKILL_IDEAS = {
    "Mathematical Reasoning": [
        "a balance scale with hidden weights that the player must pin down with few weighings",
        "a safe whose dial moves by modular arithmetic rules revealed one turn at a time",
        "mixing solutions from several flasks to hit a target concentration",
        "reconciling a ledger whose hidden error is located by summing chosen ranges",
    ],
    "Logical Deduction": [
        "questioning witnesses, some of whom always lie, to find who took the key",
        "a seating plan reconstructed from clues unlocked by inspecting seats",
        "a box of hidden logic gates identified by choosing test inputs",
        "yes/no questions that narrow down a hidden creature's attributes",
    ],
    "Spatial Reasoning": [
        "walking a dark maze by feeling which walls surround each cell",
        "rotating map tiles until a path connects two doors",
        "locating a hidden submarine on a grid with distance-only sonar pings",
        "sliding crates in a warehouse so a forklift can reach the exit",
    ],
    "Pattern Recognition": [
        "probing a black-box number machine and predicting its next outputs",
        "breaking a substitution cipher by asking for encryptions of chosen words",
        "finding the hidden rule of a sorting machine from the orders it produces",
        "repeating a lock's hidden rhythm after hearing fragments of it",
    ],
    "Optimization": [
        "loading a cargo hold under a weight limit as crate values are revealed",
        "scheduling jobs on two machines before their deadlines",
        "routing a delivery van with limited fuel through towns with unknown stock",
        "splitting a small budget across projects whose returns show up over time",
    ],
    "Causal Inference": [
        "toggling greenhouse factors to find which one makes the plants wilt",
        "swapping parts of a broken machine to find the faulty one",
        "finding which switch controls which lamp when some switches act with a delay",
        "ordering diagnostic tests to find the cause of a patient's symptoms",
    ],
}

# Tool use: example tasks, all four shown in the tool-use prompt.
TOOL_SKILL_TASKS = {
    "API Orchestration": [
        "create a record, attach an item to it using the returned id, then confirm it",
        "open a case, assign it to the on-duty owner, then notify the requester",
        "reserve a slot, pay for it with the returned quote id, then send the receipt",
        "register a device, add it to a group, then enable a schedule for the group",
    ],
    "Data Retrieval": [
        "look up the newest order of a customer and cancel it",
        "find the file with the largest size in a folder and move it to the archive",
        "search for the cheapest option that meets a condition and book it",
        "read an account's balance and transfer only the amount above a threshold",
    ],
    "State Modification": [
        "update an address, then recompute shipping for every open order",
        "rename a project, then move its open tasks to the new owner",
        "change a plan tier, then adjust the add-ons the new tier does not allow",
        "mark an invoice paid, then close the tickets that were waiting on it",
    ],
    "Error Recovery": [
        "retry a transfer after an insufficient-funds error by first topping up",
        "recover from a 'slot taken' error by picking the next free slot",
        "fix a rejected request by looking up the missing required field",
        "verify a change took effect and redo it when the check shows it did not",
    ],
    "Tool Selection": [
        "choose between a refund and a store credit tool depending on the order state",
        "pick the search tool that matches the identifier the user gave",
        "use a bulk tool when many items are affected and a single-item tool otherwise",
        "select the notification channel the user's profile says they prefer",
    ],
    "Multi-Step Workflows": [
        "onboard a user: create the account, set permissions, then send the welcome message",
        "process a return: verify eligibility, issue the label, then refund",
        "plan a trip: book the flight, then the hotel for those dates, then the car",
        "release a version: close its tasks, tag it, then announce it",
    ],
}
