"""Tests of the seed environments in envs/ and of the pool loader.

Every environment is driven through the real sandbox (`sandbox.EnvSandbox`), exactly as the agent
drives it: the tests see only observations, tool schemas and tool outputs, never the hidden state.
Per environment:
  - it passes `gate.validate_env` (the official gate plus determinism);
  - a scripted oracle, which knows only the public rules and what the observations reveal, wins
    on several seeds (so the game is winnable by reasoning, not by reading the code);
  - a seeded random policy of well-formed actions wins at most 20% of 20 seeds (so the hidden
    state really matters);
  - the same seed replays the same game (also on a used instance); different seeds differ.
Run: `.venv/bin/python -m pytest tests/test_envs.py -q`
"""
import ast
import hashlib
import itertools
import json
import os
import random
import re
from pathlib import Path

import pytest

import envs
import gate
import sandbox

ENV_DIR = Path(__file__).resolve().parent.parent / "envs"
ENV_FILES = sorted(p for p in ENV_DIR.glob("*.py") if p.name != "__init__.py")
ALLOWED_IMPORTS = {"math", "random", "re", "json", "collections", "itertools", "functools", "string",
                   "copy", "heapq", "operator", "statistics", "typing"}
ORACLE_SEEDS = range(5)
RANDOM_SEEDS = range(20)


def is_tool_env(path):
    return path.stem.endswith(tuple(envs.skill_slug(s) for s in envs.TOOL_SKILLS))


def box(command):
    return "\\boxed{" + command + "}"


def ints(pattern, text):
    """All integer groups of the last match of `pattern` in `text`."""
    found = re.findall(pattern, text)
    assert found, f"pattern {pattern!r} not in observation:\n{text}"
    last = found[-1] if isinstance(found[-1], tuple) else (found[-1],)
    return [int(v) for v in last]


# ---------------------------------------------------------------------------------------------
# Game oracles: each gets `act(command) -> observation` and the first observation, plays to a win,
# and returns nothing (the test checks the final reward).

def oracle_remainder_oracle(act, obs):
    for k in (9, 11, 13):  # pairwise coprime, product 1287 > 900 candidates
        obs = act(f"mod {k}")
    known = {int(k): int(r) for k, r in re.findall(r"N mod (\d+) = (\d+)", obs)}
    (n,) = [n for n in range(100, 1000) if all(n % k == r for k, r in known.items())]
    act(f"answer {n}")


def oracle_polynomial_probe(act, obs):
    (target,) = ints(r"Target: f\((\d+)\)", obs)
    f = {x: ints(rf"f\({x}\) = (-?\d+)", act(f"eval {x}"))[0] for x in (0, 1, 2)}
    a = (f[2] - 2 * f[1] + f[0]) // 2  # the second difference of a quadratic is 2a
    b, c = f[1] - f[0] - a, f[0]
    act(f"answer {a * target * target + b * target + c}")


LINEUP = ["ada", "ben", "cal", "dot", "eve", "fin", "gil", "hal", "ivy"]


def oracle_liar_lineup(act, obs):
    statements = {}
    for name in LINEUP:
        obs = act(f"interview {name}")
        said = re.search(r"(\w+) says: '(?:I am|(\w+) is) (guilty|innocent)'", obs)
        statements[name] = ((said.group(2) or name).lower(), said.group(3))
        # The thief is whoever makes every innocent's statement true and their own false.
        thieves = [t for t in LINEUP if all(((subject == t) == (claim == "guilty")) == (speaker != t)
                                           for speaker, (subject, claim) in statements.items())]
        if len(thieves) == 1:
            break
    act(f"accuse {thieves[0]}")


def oracle_pet_owners(act, obs):
    people, pets = ["ana", "bo", "cy", "dee"], ["cat", "dog", "fish", "bird"]
    worlds = [dict(zip(people, p)) for p in itertools.permutations(pets)]
    for person, pet in re.findall(r"(\w+) does not own the (\w+)\.", obs):
        worlds = [w for w in worlds if w[person.lower()] != pet]
    for pet, p1, p2 in re.findall(r"The (\w+) belongs to (\w+) or (\w+)\.", obs):
        worlds = [w for w in worlds if pet in (w[p1.lower()], w[p2.lower()])]
    while len(worlds) > 1:  # ask the question that splits the remaining worlds most evenly
        person, pet = max(itertools.product(people, pets),
                          key=lambda q: min(sum(w[q[0]] == q[1] for w in worlds),
                                            sum(w[q[0]] != q[1] for w in worlds)))
        yes = "Answer: yes" in act(f"ask {person} {pet}")
        worlds = [w for w in worlds if (w[person] == pet) == yes]
    act("solve " + " ".join(worlds[0][p] for p in people))


def oracle_sonar_dig(act, obs):
    (d1,) = ints(r"distance (\d+)", act("ping 0 0"))    # r + c
    (d2,) = ints(r"distance (\d+)", act("ping 0 9"))    # r + 9 - c
    act(f"dig {(d1 + d2 - 9) // 2} {(d1 - d2 + 9) // 2}")


def oracle_tilted_joystick(act, obs):
    pad = ints(r"Landing pad at \(x=(\d+), y=(\d+)\)", obs)
    before = ints(r"Drone at \(x=(\d+), y=(\d+)\)", obs)
    vector = {}
    for button in ("up", "right"):  # two probes from the centre fix the rotation and the mirror
        after = ints(r"Drone at \(x=(\d+), y=(\d+)\)", act(f"push {button}"))
        vector[button] = (after[0] - before[0], after[1] - before[1])
        before = after
    vector["down"] = tuple(-v for v in vector["up"])
    vector["left"] = tuple(-v for v in vector["right"])
    button_for = {v: b for b, v in vector.items()}
    x, y = before
    while (x, y) != tuple(pad):
        step = (1 if pad[0] > x else -1, 0) if x != pad[0] else (0, 1 if pad[1] > y else -1)
        x, y = ints(r"Drone at \(x=(\d+), y=(\d+)\)", act(f"push {button_for[step]}"))
    act("land")


def predict_next(seq):
    """Next term under the first of the six public rule families that explains every shown term."""
    d = [b - a for a, b in zip(seq, seq[1:])]
    second = [b - a for a, b in zip(d, d[1:])]
    ratio = seq[1] // seq[0] if seq[0] else 0
    rules = [(len(set(d)) == 1, seq[-1] + d[-1]),                                      # constant step
             (all(b == a * ratio for a, b in zip(seq, seq[1:])), seq[-1] * ratio),      # constant ratio
             (len(set(second)) == 1, seq[-1] + d[-1] + second[-1]),                     # quadratic
             (all(c == a + b for a, b, c in zip(seq, seq[1:], seq[2:])), seq[-1] + seq[-2]),  # sums
             (len(set(d[0::2])) == 1 and len(set(d[1::2])) == 1, seq[-1] + d[-2]),      # two steps
             (len({b - 2 * a for a, b in zip(seq, seq[1:])}) == 1, 3 * seq[-1] - 2 * seq[-2])]  # 2x + k
    return next(value for fits, value in rules if fits)


def oracle_sequence_streak(act, obs):
    for _ in range(3):
        obs = act("reveal")
    for _ in range(3):
        seq = [int(v) for v in re.search(r"Sequence: ([-\d, ]+), \?", obs).group(1).split(", ")]
        obs = act(f"guess {predict_next(seq)}")


def scramble(word, reverse, swap, shift):
    chars = list(word[::-1] if reverse else word)
    if swap:
        for i in range(0, len(chars) - 1, 2):
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(chr((ord(ch) - 97 + shift) % 26 + 97) for ch in chars)


def oracle_word_machine(act, obs):
    obs = act("feed abcdef")  # six distinct letters tell all 28 rules apart
    out = re.search(r"prints '(\w+)'", obs).group(1)
    rules = [r for r in itertools.product([False, True], [False, True], range(1, 8))
             if scramble("abcdef", *r) == out]
    assert len(rules) == 1, rules
    for _ in range(3):
        word = re.search(r"machine print for '(\w+)'", obs).group(1)
        obs = act(f"answer {scramble(word, *rules[0])}")


def oracle_cargo_hold(act, obs):
    crates = re.findall(r"(\w+) \(value (\d+)", obs)
    (capacity,) = ints(r"Hold: \d+/(\d+) kg", obs)
    weight = {name: ints(r"weighs (\d+) kg", act(f"weigh {name}"))[0] for name, _ in crates}
    best = max((subset for r in range(len(crates) + 1) for subset in itertools.combinations(crates, r)
                if sum(weight[n] for n, _ in subset) <= capacity),
               key=lambda subset: sum(int(v) for _, v in subset))
    for name, _ in best:
        act(f"load {name}")
    act("ship")


def oracle_toll_roads(act, obs):
    roads = re.findall(r"\b([A-F])-([A-F])\b", obs.split("\n")[1])
    toll = {}
    for x, y in roads:
        toll[(x.lower(), y.lower())] = ints(r"costs (\d+)", act(f"scout {x} {y}"))[0]
    best = {"a": (0, ["a"])}  # Bellman-Ford style relaxation: six towns, a handful of rounds
    for _ in range(6):
        for (x, y), cost in toll.items():
            for here, there in ((x, y), (y, x)):
                if here in best and best[here][0] + cost < best.get(there, (99, []))[0]:
                    best[there] = (best[here][0] + cost, best[here][1] + [there])
    for town in best["f"][1][1:]:
        act(f"drive {town}")


def oracle_greenhouse_trials(act, obs):
    factors = ["water", "light", "heat", "compost", "music"]

    def blooms(treatments):
        return re.search(r"Trial result: \[.*?\] -> (bloomed|no bloom)", act("trial " + treatments)).group(1) == "bloomed"

    # Interventions, not the confounded notebook: one treatment alone blooms only if it is the cause.
    cause = next((f for f in factors[:-1] if blooms(f)), factors[-1])
    others = [f for f in factors if f != cause]
    inhibitor = next((f for f in others[:-1] if not blooms(f"{cause} {f}")), others[-1])
    act(f"conclude {cause} {inhibitor}")


def oracle_sour_batch(act, obs):
    flows = re.findall(r"(\w+)->(\w+)", obs)
    stages = list(dict.fromkeys(s for flow in flows for s in flow))
    parents = {s: [p for p, c in flows if c == s] for s in stages}

    def upstream(stage):
        seen, todo = set(), [stage]
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo.extend(parents[s])
        return seen

    candidates = set(stages)
    while len(candidates) > 1:  # sample where the sour/clean answer splits the suspects best
        probe = max(stages, key=lambda s: min(len(candidates & upstream(s)), len(candidates - upstream(s))))
        sour = "is sour" in act(f"sample {probe}")
        candidates = candidates & upstream(probe) if sour else candidates - upstream(probe)
    act(f"sanitize {candidates.pop()}")


# ---------------------------------------------------------------------------------------------
# Tool-use oracles: `call(name, **arguments) -> output`; they read instructions from the first
# observation and from the "[STEP k COMPLETE - NEW INSTRUCTION]" markers in tool outputs.

def oracle_flight_booking(call, obs, tools):
    cabin, origin, dest = re.search(r"Hold an? (\w+) seat on the cheapest flight from (\w+) to (\w+)\.", obs).groups()
    listing = call("search_flights", origin=origin.lower(), destination=dest.lower())
    flights = re.findall(r"(FL\d+): .*?, (\d+) EUR", listing)
    cheapest = min(flights, key=lambda f: int(f[1]))[0]
    out = call("hold_seat", flight_id=cheapest, cabin=cabin)
    hold, card = re.search(r"Hold (H\d+) created", out).group(1), re.search(r"with the (\w+) card", out).group(1)
    out = call("pay_hold", hold_id=hold, card=card)
    ticket = re.search(r"Ticket (TK\d+)", out).group(1)
    email = re.search(r"new ticket to (\S+)\.$", out, re.M).group(1)
    call("send_itinerary", ticket_id=ticket, email=email)


def oracle_support_desk(call, obs, tools):
    customer = re.search(r"Find (\w+)'s oldest open ticket", obs).group(1).lower()
    rows = re.findall(r"(T-\d+) opened (\S+)", call("list_tickets", customer=customer, status="open"))
    oldest = min(rows, key=lambda r: r[1])[0]
    out = call("get_ticket", ticket_id=oldest)
    priority, day = re.search(r"priority (\w+)", out).group(1), re.search(r"on duty on (\w+)\.", out).group(1)
    agent = re.search(r"On duty \w+: (\w+)", call("get_roster", day=day.lower())).group(1)
    call("assign_ticket", ticket_id=oldest, agent=agent)
    if priority == "high":
        call("escalate_ticket", ticket_id=oldest)
    else:
        call("add_note", ticket_id=oldest, text="queued")


def oracle_file_shuffle(call, obs, tools):
    folder = re.search(r"Create a folder (/\S+)\.$", obs, re.M).group(1)
    call("make_dir", path=folder)
    files = re.findall(r"^(\S+\.csv)\s+(\d+) KB", call("list_dir", path="/inbox"), re.M)
    largest = max(files, key=lambda f: int(f[1]))[0]
    out = call("move_file", path=f"/inbox/{largest}", folder=folder)
    new_name = re.search(r"Rename that file to (\S+)\.$", out, re.M).group(1)
    call("rename_file", path=f"{folder}/{largest}", new_name=new_name)
    call("set_mode", path=f"{folder}/{new_name}", mode="read-only")


def oracle_line_plan(call, obs, tools):
    line, plan = re.search(r"switch line (\S+) to the (\w+) plan", obs).groups()
    for _ in range(4):  # each error names one obstacle: fix it and retry
        out = call("change_plan", line_number=line, plan=plan)
        if order := re.search(r"Error 409: order (\S+)", out):
            call("cancel_order", order_id=order.group(1))
        elif amount := re.search(r"Error 402: outstanding balance of ([\d.]+)", out):
            call("pay_balance", amount=float(amount.group(1)))
        elif "Error 423" in out:
            call("reactivate_line", line_number=line, reason="customer_request")
        else:
            break
    assert "moved to" in out, out
    call("get_line", line_number=line)
    call("send_sms", line_number=line, template="plan_changed")


def oracle_shipping_choice(call, obs, tools):
    order = re.search(r"order (O-\d+)", obs).group(1)
    info = call("get_order", order_id=order)
    (weight,), (days,) = ints(r"(\d+) kg", info), ints(r"within (\d+) day", info)
    local, channel = "local zone" in info, re.search(r"prefers (\w+)", info).group(1)
    options = []  # read each service's terms from the public tool descriptions
    for tool in tools:
        fn = tool["function"]
        terms = re.search(r"\$(\d+), arrives in (\d+) day\(s\), (?:up to (\d+) kg|any weight)(, local zone only)?",
                          fn["description"])
        if terms and int(terms.group(2)) <= days and (terms.group(3) is None or weight <= int(terms.group(3))) \
                and (local or not terms.group(4)):
            options.append((int(terms.group(1)), fn["name"]))
    call(min(options)[1], order_id=order)
    call("notify_customer", order_id=order, channel=channel)


def oracle_release_train(call, obs, tools):
    title = re.search(r"titled '([^']+)'", obs).group(1)
    out = call("create_issue", title=title, kind="release")
    release = re.search(r"Created release (REL-\d+)", out).group(1)
    component = re.search(r"open blocker bug of the (\w+) component", out).group(1)
    bugs = re.findall(r"(BUG-\d+) \[open\]", call("list_issues", component=component, label="blocker"))
    for bug in bugs:
        call("link_issue", release_id=release, issue_id=bug)
    call("transition", issue_id=release, status="testing")
    for bug in bugs:
        call("close_issue", issue_id=bug)
    call("transition", issue_id=release, status="shipped")


ORACLES = {name[len("oracle_"):]: fn for name, fn in globals().items() if name.startswith("oracle_")}


def short_name(path):
    """'toll_roads_optimization' -> 'toll_roads' (the oracle's key)."""
    slug = envs.skill_slug(envs.skill_from_name(path.stem))
    return path.stem[: -len(slug) - 1]


# ---------------------------------------------------------------------------------------------
# Random policies: plausible, well-formed actions with random arguments.

def r_int(lo, hi):
    return lambda rng: str(rng.randint(lo, hi))


def r_pick(words):
    return lambda rng: rng.choice(words)


def r_word(rng):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))


PETS = ["cat", "dog", "fish", "bird"]
FACTORS = ["water", "light", "heat", "compost", "music"]
RANDOM_COMMANDS = {  # per game: command templates whose {} are filled by the argument generators
    "remainder_oracle": [("mod {}", r_int(2, 13)), ("answer {}", r_int(100, 999))],
    "polynomial_probe": [("eval {}", r_int(-20, 20)), ("answer {}", r_int(-20000, 20000))],
    "liar_lineup": [("interview {}", r_pick(LINEUP)), ("accuse {}", r_pick(LINEUP))],
    "pet_owners": [("ask {} {}", r_pick(["ana", "bo", "cy", "dee"]), r_pick(PETS)),
                   ("solve {}", lambda rng: " ".join(rng.sample(PETS, 4)))],
    "sonar_dig": [("ping {} {}", r_int(0, 9), r_int(0, 9)), ("dig {} {}", r_int(0, 9), r_int(0, 9))],
    "tilted_joystick": [("push {}", r_pick(["up", "down", "left", "right"])), ("land", )],
    "sequence_streak": [("reveal", ), ("guess {}", r_int(-30, 200))],
    "word_machine": [("feed {}", r_word), ("answer {}", r_word)],
    "cargo_hold": [("{} {}", r_pick(["weigh", "load", "unload"]),
                    r_pick(["amber", "brass", "cocoa", "dates", "ebony", "furs"])), ("ship", )],
    "toll_roads": [("scout {} {}", r_pick("abcdef"), r_pick("abcdef")), ("drive {}", r_pick("abcdef"))],
    "greenhouse_trials": [("trial {}", lambda rng: " ".join(rng.sample(FACTORS, rng.randint(1, 3)))),
                          ("conclude {} {}", r_pick(FACTORS), r_pick(FACTORS))],
    "sour_batch": [("{} {}", r_pick(["sample", "sanitize"]), r_pick(
        ["well", "mill", "mash", "hops", "boil", "chill", "yeast", "ferment", "filter", "bottle"]))],
}


def random_argument(rng, schema, seen_words):
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if schema.get("type") in ("number", "integer"):
        return rng.randint(0, 100)
    return rng.choice(seen_words)  # a word from what the agent has seen: ids, names, paths


# ---------------------------------------------------------------------------------------------
# Episode drivers (through the sandbox only).

def play_game(box_sandbox, seed, policy):
    """One episode where `policy(act, obs)` calls act(command) -> observation.

    Returns the last step's 5-tuple and the transcript of every observation."""
    obs, _ = box_sandbox.reset(seed=seed)
    transcript, results = [obs], []

    def act(command):
        assert not results or not (results[-1][2] or results[-1][3]), "the episode is already over"
        results.append(box_sandbox.step(box(command)))
        transcript.append(results[-1][0])
        return results[-1][0]

    policy(act, obs)
    return results[-1], transcript


def play_tools(box_sandbox, seed, policy):
    """One tool-use episode: `policy(call, obs, tools)` makes tool calls, then the answer "done"."""
    obs, _ = box_sandbox.reset(seed=seed)
    transcript = [obs]

    def call(name, **arguments):
        transcript.append(box_sandbox.call_tool(name, arguments))
        return transcript[-1]

    policy(call, obs, box_sandbox.tools())
    result = box_sandbox.step("<answer>done</answer>")
    return result, transcript + [result[0]]


def play_oracle(box_sandbox, path, seed):
    play = play_tools if is_tool_env(path) else play_game
    return play(box_sandbox, seed, ORACLES[short_name(path)])


def random_game_episode(box_sandbox, seed, rng, name):
    box_sandbox.reset(seed=seed)
    for _ in range(25):  # the sandbox's turn cap; every env's own max_turns is lower
        template, *gens = rng.choice(RANDOM_COMMANDS[name])
        _, reward, terminated, truncated, _ = box_sandbox.step(box(template.format(*(g(rng) for g in gens))))
        if terminated or truncated:
            return reward, terminated
    return 0.0, False


def random_tool_policy(rng, num_calls=10):
    def policy(call, obs, tools):
        seen = re.findall(r"[A-Za-z0-9@./'_-]+", obs)
        for _ in range(num_calls):
            fn = rng.choice(tools)["function"]
            args = {k: random_argument(rng, v, seen) for k, v in fn["parameters"].get("properties", {}).items()}
            seen += re.findall(r"[A-Za-z0-9@./'_-]+", call(fn["name"], **args))
    return policy


# ---------------------------------------------------------------------------------------------
# The tests.

@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.stem)
def test_env_file_shape(path):
    """One-line docstring, exactly one *Env class, allowed imports only, no imported base class."""
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    assert doc and "\n" not in doc.strip(), "module docstring must be one line"
    env_classes = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name.endswith("Env")]
    assert len(env_classes) == 1, env_classes
    imports = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imports |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imports <= ALLOWED_IMPORTS, imports - ALLOWED_IMPORTS
    assert envs.skill_from_name(path.stem) != envs.UNKNOWN_SKILL
    assert short_name(path) in ORACLES, f"no oracle for {path.stem}"
    assert is_tool_env(path) == ("ToolUseBaseEnv" in path.read_text())


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.stem)
def test_env_validates(path):
    result = gate.validate_env(path.read_text())
    assert result.ok, f"{path.stem} failed at {result.stage}: {result.error}"


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.stem)
def test_oracle_wins(path):
    with sandbox.EnvSandbox(path.read_text()) as box_sandbox:
        for seed in ORACLE_SEEDS:
            (obs, reward, terminated, truncated, _), transcript = play_oracle(box_sandbox, path, seed)
            assert (reward, terminated, truncated) == (1.0, True, False), f"seed {seed}: {obs}"
            assert len(transcript) >= 4, "a win must take at least three actions"


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.stem)
def test_random_play_mostly_loses(path):
    wins = 0
    with sandbox.EnvSandbox(path.read_text()) as box_sandbox:
        for seed in RANDOM_SEEDS:
            rng = random.Random(1000 + seed)
            if is_tool_env(path):
                (_, reward, terminated, _, _), _ = play_tools(box_sandbox, seed, random_tool_policy(rng))
            else:
                reward, terminated = random_game_episode(box_sandbox, seed, rng, short_name(path))
            wins += reward == 1.0 and terminated
    assert wins <= 0.2 * len(RANDOM_SEEDS), f"random play won {wins}/{len(RANDOM_SEEDS)}"


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.stem)
def test_same_seed_same_game(path):
    code = path.read_text()
    with sandbox.EnvSandbox(code) as first, sandbox.EnvSandbox(code) as second:
        assert first.reset(seed=3)[0] == second.reset(seed=3)[0]
        # A used instance replays the same game as a fresh one; other seeds give other games.
        transcripts = [play_oracle(first, path, seed)[1] for seed in range(4)]
        assert play_oracle(second, path, 3)[1] == transcripts[3]
    assert len({tuple(t) for t in transcripts}) > 1, "the seed does not change the game"


def test_pool_has_every_skill():
    skills = [envs.skill_from_name(p.stem) for p in ENV_FILES]
    for skill in envs.GAME_SKILLS:
        assert skills.count(skill) >= 2, skill
    for skill in envs.TOOL_SKILLS:
        assert skills.count(skill) >= 1, skill


def test_skill_from_name():
    assert envs.skill_slug("Multi-Step Workflows") == "multi_step_workflows"
    assert envs.skill_from_name("game_00012_005_pattern_recognition") == "Pattern Recognition"
    assert envs.skill_from_name("game_00001_000_api_orchestration") == "API Orchestration"
    assert envs.skill_from_name("game_00001_000_strategic_planning") == envs.UNKNOWN_SKILL


def test_load_pool_directory(capsys):
    pool = envs.load_pool(ENV_DIR)
    assert sorted(e.env_id for e in pool) == [p.stem for p in ENV_FILES]
    assert all(e.skill in envs.GAME_SKILLS or e.skill in envs.TOOL_SKILLS for e in pool)
    assert f"pool: {len(ENV_FILES)}/{len(ENV_FILES)} environments valid (0 skipped)" in capsys.readouterr().out


def test_one_py_file_is_a_pool_of_one_and_the_unvalidated_seeds_print_nothing(capsys):
    [env] = envs.load_pool(ENV_DIR / "sonar_dig_spatial_reasoning.py")
    assert (env.env_id, env.skill) == ("sonar_dig_spatial_reasoning", "Spatial Reasoning")
    assert "pool: 1/1 environments valid (0 skipped)" in capsys.readouterr().out
    assert len(envs.load_pool(ENV_DIR, validate=False)) == len(ENV_FILES) and capsys.readouterr().out == ""


def test_load_pool_jsonl(tmp_path, capsys):
    good = (ENV_DIR / "sonar_dig_spatial_reasoning.py").read_text()
    lines = [json.dumps({"code": good, "game_file": "game_00003_001_spatial_reasoning.py"}),
             json.dumps({"code": "class BrokenEnv:\n    def reset(self, seed=None:\n", "skill": "Optimization"}),
             "this line is not JSON",
             json.dumps({"skill": "Optimization"}),  # no code
             ""]
    pool_file = tmp_path / "pool.jsonl"
    pool_file.write_text("\n".join(lines))
    pool = envs.load_pool(pool_file)
    assert [(e.env_id, e.skill) for e in pool] == [("game_00003_001_spatial_reasoning", "Spatial Reasoning")]
    out = capsys.readouterr().out
    assert "pool: 1/2 environments valid (2 skipped)" in out
    # a released game our gate rejects is not dropped silently: a warning names it and the reason
    assert "WARNING: 1 of 2 pool environments failed validation" in out and "pool_00002: syntax" in out


def test_a_lone_surrogate_in_a_pool_records_name_or_skill_is_replaced(tmp_path, capsys):
    good = (ENV_DIR / "sonar_dig_spatial_reasoning.py").read_text()
    record = json.dumps({"code": good, "game_file": "game\ud800_spatial_reasoning.py", "skill": "Spatial\udfff"})
    (tmp_path / "pool.jsonl").write_text(record)
    [env] = envs.load_pool(tmp_path / "pool.jsonl")
    assert env.env_id == "game\ufffd_spatial_reasoning" and env.skill == "Spatial\ufffd"
    env.env_id.encode("utf-8")
    # The code too, validated or not (a seed pool's reaches the designer's prompt through memory).
    marked = json.dumps({"code": good.replace("import", "# \ud800\nimport", 1), "skill": "Spatial Reasoning"})
    (tmp_path / "pool.jsonl").write_text(marked)
    for validate in (True, False):
        [env] = envs.load_pool(tmp_path / "pool.jsonl", validate=validate)
        assert "# \ufffd\nimport" in env.code and env.code.encode("utf-8")


def test_a_folder_pools_undecodable_file_name_or_lone_surrogate_manifest_skill_is_replaced(tmp_path):
    # A file name that is not UTF-8 reads as lone surrogates (surrogateescape), as does a manifest's
    # "\ud800": ids and skills are hashed (play_seeds), printed and tokenised, which all need UTF-8.
    good = (ENV_DIR / "sonar_dig_spatial_reasoning.py").read_text()
    (tmp_path / os.fsdecode(b"caf\xe9_spatial_reasoning.py")).write_text(good)
    (tmp_path / "game_000000.py").write_text(good)
    (tmp_path / "manifest.json").write_text(json.dumps([{"file_name": "game_000000.py", "skill": "Spatial\udfff"}]))
    pool = envs.load_pool(tmp_path, validate=False)
    assert [(e.env_id, e.skill) for e in pool] == [("caf\ufffd_spatial_reasoning", "Spatial Reasoning"),
                                                   ("game_000000", "Spatial\ufffd")]


def test_bad_bytes_a_byte_order_mark_or_a_broken_manifest_lose_only_what_is_bad(tmp_path, capsys):
    good = (ENV_DIR / "sonar_dig_spatial_reasoning.py").read_text()
    record = lambda name: json.dumps({"code": good, "game_file": name}).encode()
    (tmp_path / "pool.jsonl").write_bytes(b"\xef\xbb\xbf" + record("a_spatial_reasoning.py") + b"\n\xff\xfe{\n"
                                          + record("b_spatial_reasoning.py"))
    assert [e.env_id for e in envs.load_pool(tmp_path / "pool.jsonl")] == ["a_spatial_reasoning", "b_spatial_reasoning"]
    assert "pool: 2/2 environments valid (1 skipped)" in capsys.readouterr().out
    (tmp_path / "one.json").write_text(json.dumps({"environments": [json.loads(record("c.py"))]}, indent=2))
    assert [e.env_id for e in envs.load_pool(tmp_path / "one.json")] == ["c"]
    folder = tmp_path / "games"
    folder.mkdir()
    (folder / "d_spatial_reasoning.py").write_text(good)
    (folder / "e_optimization.py").write_bytes(b"\xff" + good.encode())
    (folder / "manifest.json").write_text("{not json")
    assert [e.env_id for e in envs.load_pool(folder)] == ["d_spatial_reasoning"]
    out = capsys.readouterr().out
    assert "e_optimization.py" in out and "manifest.json has 1 line(s) that are not JSON" in out and "(1 skipped)" in out
    (tmp_path / "f_spatial_reasoning.py").write_bytes(b"\xef\xbb\xbf" + good.encode())      # one file, with a BOM
    assert [e.env_id for e in envs.load_pool(tmp_path / "f_spatial_reasoning.py")] == ["f_spatial_reasoning"]


def test_load_pool_missing_path(tmp_path):
    missing = tmp_path / "no_such_pool.jsonl"
    with pytest.raises(FileNotFoundError, match="no_such_pool.jsonl"):
        envs.load_pool(missing)


def released_pool(root):
    """A pool laid out as the authors release theirs (METHOD.md 10): games/ with game_<rollout>_<index>_<skill>.py
    files, and beside it manifest.jsonl and checksums.sha256 (sha256sum's format, paths from the root)."""
    games = root / "games"
    games.mkdir(parents=True)
    sources = sorted(ENV_DIR.glob("*_optimization.py")) + sorted(ENV_DIR.glob("*_pattern_recognition.py"))
    lines, manifest = [], []
    for index, source in enumerate(sources):
        name = f"game_00007_{index:03d}_{envs.skill_slug(envs.skill_from_name(source.stem))}.py"
        (games / name).write_bytes(source.read_bytes())
        lines.append(f"{hashlib.sha256(source.read_bytes()).hexdigest()}  games/{name}")
        manifest.append(json.dumps({"game_file": name, "skill": envs.skill_slug(envs.skill_from_name(source.stem))}))
    (root / "checksums.sha256").write_text("\n".join(lines) + "\n")
    (root / "manifest.jsonl").write_text("\n".join(manifest) + "\n")
    return games, len(sources)


def test_a_released_pool_loads_as_it_is_from_its_games_folder_or_its_root(tmp_path):
    games, count = released_pool(tmp_path)
    for path in (games, tmp_path):
        pool = envs.load_pool(path)
        assert len(pool) == count and {e.skill for e in pool} == {"Optimization", "Pattern Recognition"}
        assert all(e.env_id.startswith("game_00007_") for e in pool)


def test_a_pool_that_does_not_match_its_checksums_is_refused(tmp_path):
    games, _ = released_pool(tmp_path)
    first, second = sorted(games.glob("*.py"))[:2]
    first.write_text(first.read_text() + "\n# changed\n")
    second.unlink()
    with pytest.raises(ValueError, match=r"^\S*games does not match .*1 file\(s\) differ \['game_00007_000_optimization.py'\], "
                                         r"1 listed file\(s\) missing \['game_00007_001_optimization.py'\]"):
        envs.load_pool(games)


def test_skills_come_from_a_manifest_when_file_names_do_not_carry_them(tmp_path):
    # The tool-use pool's files are game_000000.py; its records carry the skill as a slug.
    (tmp_path / "game_000000.py").write_text((ENV_DIR / "shipping_choice_tool_selection.py").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps([{"file_name": "game_000000.py", "skill": "tool_selection"}]))
    [env] = envs.load_pool(tmp_path)
    assert (env.env_id, env.skill) == ("game_000000", "Tool Selection")


def test_a_json_list_of_records_with_slug_skills_and_one_name_twice(tmp_path):
    code = (ENV_DIR / "toll_roads_optimization.py").read_text()
    records = [{"game_id": "game_000001", "file_name": "game_000001.py", "skill": "optimization", "code": code}] * 2
    (tmp_path / "pool.json").write_text(json.dumps(records))
    pool = envs.load_pool(tmp_path / "pool.json")
    assert [(e.env_id, e.skill) for e in pool] == [("game_000001", "Optimization"), ("game_000001_2", "Optimization")]


def test_a_pool_with_nothing_valid_is_an_error_not_an_empty_run(tmp_path, capsys):
    (tmp_path / "pool.jsonl").write_text(json.dumps({"code": "class BrokenEnv:\n    def reset(self, seed=None:\n"}))
    with pytest.raises(ValueError, match="no valid environment in .*pool.jsonl.*syntax"):
        envs.load_pool(tmp_path / "pool.jsonl")
    assert "SyntaxError" not in capsys.readouterr().out      # the error says why, once: no WARNING before it
    (tmp_path / "notes.jsonl").write_text("[1, 2")
    with pytest.raises(ValueError, match="is not a pool"):
        envs.load_pool(tmp_path / "notes.jsonl")


def test_docstring_examples():
    import doctest
    assert doctest.testmod(envs).failed == 0


EASY_FILES = sorted((ENV_DIR / "easy").glob("*.py"))


@pytest.mark.parametrize("path", EASY_FILES, ids=lambda p: p.stem)
def test_an_easy_game_reads_its_answer_as_a_small_model_writes_it(path):
    # envs/easy/, the embedded preset's seed pool: one reply, read at once. The first number that is not
    # an operand counts, boxed or bare, after working or not; a list's "1. " is no answer.
    assert gate.validate_env(path.read_text()).ok
    with sandbox.EnvSandbox(path.read_text()) as box_sandbox:
        questions = set()
        for seed, reply in enumerate(["{a} + {b} = {s}", "\\boxed{{{s}}}", "{s}", "1. {a} + {b} is {s}\n2. so"]):
            obs, _ = box_sandbox.reset(seed=seed)
            questions.add(obs)
            a, b = ints(r"What is (\d+) \+ (\d+)\?", obs)
            assert box_sandbox.step(reply.format(a=a, b=b, s=a + b))[1:4] == (1.0, True, False), (obs, reply)
            box_sandbox.reset(seed=seed)
            assert box_sandbox.step(f"{a} + {b} = {a + b + 1}, no: {a + b}")[1:4] == (0.0, True, False)
        assert len(questions) > 1, "the seed does not change the question"
