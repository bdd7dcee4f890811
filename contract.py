"""The environment contract (METHOD.md 1): what environment code must look like and how it is run.

Everything here executes INSIDE a sandbox child (sandbox.py imports it into its fork server), never
in the trainer: the namespace environments are exec'd in, class discovery, construction with the
max_turns cap, play-time coercion of what reset()/step() return, the designer's validation gate
(METHOD.md 3.1, plus a determinism check), and `ToolUseBaseEnv`, the base class that tool-use
environments subclass without importing it. The code extraction and brace repair applied to a
designer's response are pure text functions and also live here.

The gate is deliberately stricter than METHOD.md 3.1 in three places:
- a blank (whitespace-only) observation from reset() fails, not only an empty one: it would give
  the agent an empty `Observation:` line and nothing to play.
- reset(seed=123) must also return a non-blank observation, not merely not raise: every play resets
  with its own seed (agent.play_seeds), so a seed other than 42 must give a playable game too.
- the criteria gate (step 3) also runs at rollout 0 and rejects when cls() or reset(seed) raises
  for a seed 0-2 instead of skipping that seed: such a game fails its plays at those seeds, and a
  game written at rollout 0 is no more trustworthy than a later one.
"""
import ast
import itertools
import json
import math
import random
import re
import sys

MAX_ERROR_CHARS = 64 * 1024        # an environment's exception text is truncated to this
MAX_ACTION_CHARS = 100_000         # METHOD 1.1: the action string is truncated to 100k chars
PLAY_MAX_TURNS = 25                # METHOD 1.1: designed max_turns is capped at 25 at play time
VALIDATION_PROBES = ("\\boxed{1}", "\\boxed{test}", "\\boxed{42}")
UNBOXED_PROBES = ("1", "2", "test")   # METHOD 3.1 step 2: exceptions ignored, only hangs count


# ---------------------------------------------------------------------------------------------
# ToolUseBaseEnv: the base class tool-use environments subclass (METHOD.md 1.3). It is injected
# into every environment's namespace (and importable as module `tool_use_base_env`).
# ---------------------------------------------------------------------------------------------
class ToolUseBaseEnv:
    """Tools are `self._tools = {name: {"description", "parameters"}}` plus `tool_<name>` methods."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._tools, self._state, self._call_history = {}, {}, []
        self._expected_answer = None
        self.reset()

    def reset(self, seed=None):
        raise NotImplementedError("a tool-use environment implements reset()")

    def get_tools(self):
        return [{"type": "function", "function": {"name": name, "description": spec.get("description", ""),
                                                  "parameters": spec.get("parameters", {"type": "object", "properties": {}})}}
                for name, spec in self._tools.items()]

    def execute_tool(self, name, args):
        method = getattr(self, f"tool_{name}", None)
        if name not in self._tools or method is None:
            return {"output": f"Error: unknown tool '{name}'. Available: {', '.join(self._tools)}", "returncode": 1}
        self._call_history.append({"name": name, "arguments": args})
        try:
            return {"output": str(method(**(args or {}))), "returncode": 0}
        except Exception as e:  # a bad call is the agent's mistake, reported to it, not an env crash
            return {"output": f"Error: {type(e).__name__}: {e}", "returncode": 1}

    def _check_answer(self, answer):
        expected = str(self._expected_answer).strip()
        if answer.strip().lower() == expected.lower():
            return True
        try:
            num = lambda s: float(s.strip().replace("$", "").replace(",", ""))
            return abs(num(answer) - num(expected)) <= 0.01
        except ValueError:
            return False

    def _incorrect_answer_feedback(self):
        messages, current = getattr(self, "_user_messages", None), getattr(self, "_current_msg", None)
        if messages and current is not None and current < len(messages):
            return f"Not done yet. The pending instruction is: {messages[current]}"
        return "That answer is not correct. Keep working with the tools."

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        reveal = lambda obs: obs + (f"\nSolution: {self.solution()}" if truncated and hasattr(self, "solution") else "")
        answer = re.search(r"<answer>(.*?)</answer>", action, re.DOTALL)
        if answer:
            if self._check_answer(answer.group(1)):
                return "Correct!", 1.0, True, False, {}
            return reveal(self._incorrect_answer_feedback()), 0.0, False, truncated, {}
        call = re.search(r"<tool_call>(.*?)</tool_call>", action, re.DOTALL)
        if call:
            try:
                parsed = json.loads(call.group(1))
                name, args = parsed["name"], parsed.get("arguments", parsed.get("parameters", {}))
            except (ValueError, KeyError, TypeError, AttributeError):
                return reveal("Error: the tool call is not valid JSON with a name."), -0.1, False, truncated, {}
            if not isinstance(name, str) or name not in self._tools:   # ["f"] is unknown, not a crash
                return reveal(f"Unknown tool. Available tools: {', '.join(self._tools)}"), 0.0, False, truncated, {}
            return reveal("Tool result: " + self.execute_tool(name, args)["output"]), 0.0, False, truncated, {}
        return (reveal('Format error: call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
                       "or answer with <answer>...</answer>."), -0.1, False, truncated, {})


# ---------------------------------------------------------------------------------------------
# Code extraction and repair (METHOD.md 1.1): first ```python block, f-string brace repair.
# ---------------------------------------------------------------------------------------------
def extract_code(text):
    """The first ```python block of a response, else the whole text.

    >>> extract_code("Here:\\n```python\\nx = 1\\n```\\nmore ```python\\ny\\n```")
    'x = 1'
    """
    match = re.search(r"```python\n(.*?)\n```", text, re.DOTALL)
    return match.group(1) if match else text


def repair_braces(code, max_iterations=20):
    """Double the braces of `{...}` that are not Python expressions on the line a SyntaxError names.

    The common bug is an f-string that shows a command format: f"Reply \\boxed{move A 3}" is a
    syntax error; after repair it is f"Reply \\boxed{{move A 3}}". `{name}` is left alone.
    """
    def is_expression(inner):  # `{x:.2f}` and `{x!r}` count: the part before ':' or '!' parses
        for candidate in (inner, re.split(r"[!:]", inner)[0]):
            try:
                if candidate.strip():
                    ast.parse(candidate.strip(), mode="eval")
                    return True
            except SyntaxError:
                pass
        return False

    for _ in range(max_iterations):
        try:
            ast.parse(code)
            return code
        except SyntaxError as error:
            lines = code.split("\n")
            if not error.lineno or error.lineno > len(lines):
                return code
            line = lines[error.lineno - 1]
            fixed = re.sub(r"(?<!\{)\{([^{}]*)\}(?!\})",
                           lambda m: m.group(0) if is_expression(m.group(1)) else "{{" + m.group(1) + "}}", line)
            if fixed == line:
                return code
            lines[error.lineno - 1] = fixed
            code = "\n".join(lines)
    return code



# ---------------------------------------------------------------------------------------------
# Loading and running environment code (inside the sandbox child)
# ---------------------------------------------------------------------------------------------
class ContractError(Exception):
    """Raised in the child to send one SandboxError kind back to the parent."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def describe(error):
    """`Type: message (line N)` of an exception raised by environment code, never raising itself."""
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:
        text = f"{type(error).__name__}: <unprintable message>"
    tb, line = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<environment>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return (text + (f" (line {line})" if line else ""))[:MAX_ERROR_CHARS]


def namespace():
    """A fresh module namespace pre-populated as the official loader does (METHOD.md 1.1)."""
    import collections, copy, functools, heapq, operator, random, statistics, string, typing
    import numpy
    ns = {"__name__": "environment", "__builtins__": __builtins__, "np": numpy, "numpy": numpy}
    for module in (itertools, math, random, re, json, collections, functools, string, copy, heapq,
                   operator, statistics):
        ns[module.__name__] = module
    for module, names in ((collections, "deque defaultdict Counter OrderedDict namedtuple"),
                          (itertools, "combinations permutations product chain accumulate"),
                          (functools, "reduce lru_cache"), (copy, "deepcopy"), (heapq, "heappush heappop"),
                          (typing, "Tuple Dict List Optional Union Any Set FrozenSet Callable Iterable "
                                   "Sequence Mapping")):
        ns.update({name: getattr(module, name) for name in names.split()})
    ns["ToolUseBaseEnv"] = ToolUseBaseEnv
    return ns


def load_env_class(code):
    """Exec the code, find the environment class: the first `*Env` callable (METHOD.md 1.1)."""
    import linecache, types
    module = types.ModuleType("tool_use_base_env")
    module.ToolUseBaseEnv = ToolUseBaseEnv
    sys.modules["tool_use_base_env"] = module
    linecache.cache["<environment>"] = (len(code), None, code.splitlines(True), "<environment>")
    environment = types.ModuleType("environment")
    environment.__dict__.update(namespace())
    sys.modules["environment"] = environment  # dataclasses resolve string annotations through their module
    ns = environment.__dict__
    try:
        exec(compile(code, "<environment>", "exec"), ns)
    except MemoryError:
        raise
    except BaseException as e:
        raise ContractError("load", describe(e))
    for name, obj in list(ns.items()):
        if name.endswith("Env") and callable(obj) and name not in ("Env", "ToolUseBaseEnv"):
            return obj
    raise ContractError("load", "no class whose name ends in 'Env' was defined")


def construct(cls, max_turns):
    """`cls()`, falling back to `cls(max_turns=...)`; then cap max_turns (METHOD.md 1.1)."""
    try:
        try:
            env = cls()
        except TypeError:
            env = cls(max_turns=max_turns)
        designed = getattr(env, "max_turns", None)
        if hasattr(env, "max_turns"):
            ok = isinstance(designed, int) and not isinstance(designed, bool) and designed > 0
            env.max_turns = min(designed, max_turns) if ok else max_turns
    except MemoryError:
        raise
    except BaseException as e:
        raise ContractError("load", describe(e))
    for method in ("reset", "step"):
        if not callable(getattr(env, method, None)):
            raise ContractError("load", f"the environment has no {method}() method")
    return env


def plain_info(info):
    """Keep JSON scalars of an info dict; drop the rest (the official wrapper drops non-numeric)."""
    if not isinstance(info, dict):
        return {}
    return {str.__str__(k): v if type(v) is not str else str.__str__(v) for k, v in dict.items(info)
            if isinstance(k, str) and (v is None or type(v) in (bool, int, str)
                                       or (type(v) is float and math.isfinite(v)))}


def as_observation(obs, where):
    if not isinstance(obs, str):
        raise ContractError("contract", f"{where} must return a str observation, got {type(obs).__name__}")
    return str.__str__(obs)  # an exact str, whatever subclass came back


def play_reset(env, seed):
    """reset(seed) of a played instance. The process's global RNGs are seeded from the play's seed first:
    environments that draw from `random` or numpy's global generator in step() without seeding them
    (dice, shuffles) then play the same for the same seed in every process, so that the ranks of a
    multi-GPU run, which all play the same rollouts, stay in step. One instance per process here."""
    if seed is not None:
        import numpy
        random.seed(seed)
        numpy.random.seed(seed % 2**32)
    result = env.reset(seed=seed)
    if isinstance(result, str):
        return [as_observation(result, "reset()"), {}]
    if not isinstance(result, tuple) or len(result) != 2:
        raise ContractError("contract", "reset() must return (observation, info)")
    return [as_observation(result[0], "reset()"), plain_info(result[1])]


def play_step(env, action):
    result = env.step(str(action)[:MAX_ACTION_CHARS])
    if not isinstance(result, tuple) or len(result) != 5:
        got = f"a tuple of length {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise ContractError("contract", f"step() must return a 5-tuple (obs, reward, terminated, truncated, info), got {got}")
    obs, reward, terminated, truncated, info = result
    try:
        reward = float(reward)
    except (TypeError, ValueError):
        raise ContractError("contract", f"step() reward must be a number, got {type(reward).__name__}")
    if not math.isfinite(reward):
        raise ContractError("contract", f"step() reward must be finite, got {reward}")
    return [as_observation(obs, "step()"), reward, bool(terminated), bool(truncated), plain_info(info)]


def gate(code):
    """The official validation gate (METHOD.md 3.1 steps 2 and 3) plus determinism. Returns the
    class name or fails with (stage, message). Runs inside one child, within one deadline, so a
    hang anywhere, the unboxed probes included, is the caller's "timeout" stage."""
    def fail(stage, message):
        raise ContractError("contract", json.dumps([stage, message]))

    try:
        cls = load_env_class(code)
    except ContractError as e:
        fail("exec" if "no class" not in str(e) else "class", str(e))
    name = getattr(cls, "__name__", "?")

    def construct():
        try:
            try:
                return cls(max_turns=1000)  # the gate's construction (METHOD 3.1 b)
            except TypeError:
                return cls()
        except Exception as e:
            fail("construct", describe(e))

    def reset(env, seed, stage):
        try:
            result = env.reset(seed=seed)
        except Exception as e:
            fail(stage, describe(e))
        obs = result[0] if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict) else result
        if not isinstance(obs, str) or not obs.strip():
            fail(stage, f"reset(seed={seed}) must return (non-empty str, dict) or a non-empty str")
        return obs

    env = construct()
    for method in ("reset", "step"):
        if not callable(getattr(env, method, None)):
            fail("interface", f"{name} has no {method}() method")
    first = reset(env, 42, "reset")
    for probe in VALIDATION_PROBES:
        try:
            result = env.step(probe)
        except Exception as e:
            fail("step", f"step({probe!r}) raised {describe(e)}")
        types_ok = (isinstance(result, tuple) and len(result) == 5 and isinstance(result[0], str)
                    and isinstance(result[1], (int, float)) and type(result[2]) is bool
                    and type(result[3]) is bool and isinstance(result[4], dict))
        if not types_ok:
            fail("step", f"step({probe!r}) must return (str, int|float, bool, bool, dict), got {result!r:.300}")
        if not (math.isfinite(result[1]) and -10 <= result[1] <= 10):
            fail("step", f"step({probe!r}) reward {result[1]} is outside [-10, 10]")
        if result[2] or result[3]:
            break
    reset(env, 123, "reseed")
    if reset(construct(), 42, "determinism") != first:
        fail("determinism", "two fresh instances reset with seed 42 gave different first observations")
    unboxed_probes(construct)
    if isinstance(env, ToolUseBaseEnv):
        criteria_gate(cls, fail)
    return name


def unboxed_probes(construct):
    """METHOD 3.1 step 2's last check: on a fresh instance, reset() and step each UNBOXED_PROBES
    action, ignoring every exception (the official wrapper swallows them). Only a hang fails, and
    the caller's deadline turns it into the "timeout" stage: a game that loops on a reply without a
    box would otherwise pass the gate and hang its first play with an unboxed reply."""
    try:
        env = construct()
    except Exception:
        return
    for action in (None, *UNBOXED_PROBES):
        try:
            env.reset() if action is None else env.step(action)
        except Exception:
            pass


def criteria_gate(cls, fail):
    """Tool use (METHOD 3.1 step 3): reject iff at every evaluable seed some criterion raises."""
    evaluable, raising = 0, []
    for seed in (0, 1, 2):
        try:
            env = cls()
            env.reset(seed=seed)
        except Exception as e:
            fail("criteria", f"reset(seed={seed}) raised {describe(e)}")
        criteria, state = getattr(env, "_message_criteria", None), getattr(env, "_state", None)
        if criteria is None or state is None:
            continue
        evaluable += 1
        for criterion in criteria:
            try:
                criterion(state)
            except Exception as e:
                raising.append(f"seed {seed}: {describe(e)}")
                break
    if evaluable and len(raising) == evaluable:
        fail("criteria", "a success criterion raises on the initial state at every seed: " + "; ".join(raising))
