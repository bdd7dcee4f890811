"""The environment contract (METHOD.md 1): what environment code must look like, how it is run, and
what may come back from it.

Two sides. Inside a sandbox child (forkserver.py imports it before forking), never in the trainer:
the namespace environments are exec'd in, class discovery, construction with the max_turns cap,
play-time coercion of what reset()/step() return (with the types the gate checks), the unboxed
probes and criteria of the gate, and `ToolUseBaseEnv`, the base class that tool-use environments
subclass without importing it (or import as `tool_use_base_env` or by the official package path).
In the trainer: `checked_*` and `clean_*`, the types a reply must have whatever the child did to the
coercion, and the code extraction and brace repair applied to a designer's response (pure text).
A child's reset() calls seed the global `random` and numpy generators from the seed first, as plays
do, so a game whose only randomness is the unseeded global `random` is deterministic there too.
Where the gate is stricter than the official one: METHOD.md 14.
"""
import ast
import functools
import itertools
import json
import math
import random
import re
import sys
import threading
import traceback
from contextlib import suppress


MAX_ERROR_CHARS = 64 * 1024        # an environment's exception text is truncated to this
MAX_ACTION_CHARS = 100_000         # METHOD 1.1: the action string is truncated to 100k chars
PLAY_MAX_TURNS = 25                # METHOD 1.1's cap on a designed max_turns, where no run gives its --max-turns
REWARD_RANGE = (-10.0, 10.0)       # METHOD 3.1 e: the gate's probes must stay in it; a play's rewards are clipped to it
VALIDATION_PROBES = ("\\boxed{1}", "\\boxed{test}", "\\boxed{42}")
UNBOXED_PROBES = ("1", "2", "test")   # METHOD 3.1 step 2: exceptions ignored, only hangs count


# The tags of tool use, found with str.find rather than a lazy regex such as "<tool_call>(.*?)</tool_call>":
# the regex scans from every opener to the end of the reply when none closes, which is quadratic (10 s
# in the trainer for a degenerate reply of 8,000 "<tool_call>"). Both give the same blocks (tests/test_actions.py).
def tag_blocks(text, opener, closer):
    """The text between each `opener` and the first `closer` after it, left to right."""
    blocks, at = [], 0
    while (start := text.find(opener, at)) >= 0 and (end := text.find(closer, start + len(opener))) >= 0:
        blocks.append(text[start + len(opener):end])
        at = end + len(closer)
    return blocks



# ---------------------------------------------------------------------------------------------
# ToolUseBaseEnv: the base class tool-use environments subclass (METHOD.md 1.3). It is injected
# into every environment's namespace (and importable as module `tool_use_base_env`).
# ---------------------------------------------------------------------------------------------
class ToolUseBaseEnv:
    """Tools are `self._tools = {name: {"description", "parameters"}}` plus `tool_<name>` methods.
    What it rewards, ends, reveals and dispatches is the official base class's (METHOD.md 1.3); its
    feedback texts are our own words."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns, self.turn_count = max_turns, 0
        self._tools, self._state, self._call_history = {}, {}, []
        self._expected_answer = None
        self.reset()

    def reset(self, seed=None):
        raise NotImplementedError("a tool-use environment implements reset()")

    def solution(self):
        raise NotImplementedError("a tool-use environment implements solution()")

    def close(self):
        pass

    def get_tools(self):
        return [{"type": "function", "function": {"name": name, "description": spec.get("description", ""),
                                                  "parameters": spec.get("parameters", {"type": "object", "properties": {}})}}
                for name, spec in self._tools.items()]

    def execute_tool(self, name, args):
        """Any `tool_<name>` method, listed in `_tools` or not (as officially); a successful call goes
        into `_call_history` with its result."""
        method = getattr(self, f"tool_{name}", None)
        if method is None:
            return {"output": f"Error: unknown tool '{name}'. Available: {', '.join(self._tools)}", "returncode": 1}
        try:
            result = str(method(**args))
        except Exception as e:  # a bad call is the agent's mistake, reported to it, not an env crash
            return {"output": f"Error calling {name}: {type(e).__name__}: {e}", "returncode": 1}
        self._call_history.append({"name": name, "arguments": args, "result": result})
        return {"output": result, "returncode": 0}

    def _check_answer(self, answer):
        """Case-insensitive equality, else numbers within 0.01 ($ and , dropped). `answer` is stripped."""
        answer, expected = str(answer).strip(), str(self._expected_answer).strip()
        if answer.lower() == expected.lower():
            return True
        try:
            number = lambda s: float(s.replace("$", "").replace(",", "").strip())
            return abs(number(answer) - number(expected)) < 0.01
        except (ValueError, TypeError):
            return False

    def _obs_suffix(self):
        """Officially a no-op kept for older environments that append it in reset(): tools travel
        through the chat template, not the observation."""
        return ""

    def _incorrect_answer_feedback(self):
        messages, current = getattr(self, "_user_messages", None), getattr(self, "_current_msg", None)
        if isinstance(messages, (list, tuple)) and type(current) is int and 0 <= current < len(messages):
            return (f"Not done yet: step {current + 1} of {len(messages)} is still open: {messages[current]} "
                    "Finish it with the tools, then answer <answer>done</answer>.")
        return "That answer is not correct. Keep working with the tools."

    def step(self, action):
        """An <answer> first, else one <tool_call>; on the last turn (truncated) the solution is shown."""
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns

        def reply(observation, reward=0.0):
            if truncated:
                return f"{observation}\n\nTime is up. Solution:\n{self.solution()}", 0.0, False, True, {}
            return observation, reward, False, False, {}

        answer = tag_blocks(action, "<answer>", "</answer>")   # the first block of each counts
        if answer:
            if self._check_answer(answer[0].strip()):
                return "Correct!", 1.0, True, False, {}
            return reply(self._incorrect_answer_feedback())
        call = tag_blocks(action, "<tool_call>", "</tool_call>")
        if not call:
            return reply('Format error: call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
                         "or answer with <answer>...</answer>.", -0.1)
        try:
            parsed = json.loads(call[0])
            name, arguments = parsed.get("name", ""), parsed.get("arguments", {})
        except (ValueError, AttributeError, RecursionError):   # not JSON (or nested too deep), not an object
            return reply("Format error: the tool call is not a JSON object.", -0.1)
        if getattr(self, f"tool_{name}", None) is None:   # a missing or non-str name is an unknown tool
            return reply(f"Unknown tool '{name}'. Available tools: {', '.join(self._tools)}")
        return reply("Tool result:\n" + self.execute_tool(name, arguments if isinstance(arguments, dict) else {})["output"])


# ---------------------------------------------------------------------------------------------
# Code extraction and repair (METHOD.md 1.1): first ```python block, f-string brace repair.
# ---------------------------------------------------------------------------------------------
def extract_code(text):
    """The first ```python block of a response, else the whole text.

    >>> extract_code("Here:\\n```python\\nx = 1\\n```\\nmore ```python\\ny\\n```")
    'x = 1'
    """
    return next(iter(tag_blocks(text, "```python\n", "\n```")), text)


# CPython 3.11's parser keeps a recursion counter per interpreter, not per thread: two threads parsing at
# once (validate_env runs in a thread pool) can fail with "AST constructor recursion depth mismatch".
_PARSING = threading.Lock()


def parse(source, mode="exec"):
    """ast.parse, one thread at a time."""
    with _PARSING:
        return ast.parse(source, mode=mode)


# A one-line f-string literal (any prefix with f, either quote; an escape or any other character, never
# both, so that a run of backslashes matches in one way only), and a replacement field in it.
_FSTRING = re.compile(r"""(?<![\w'"])([rRbB]?[fF][rRbB]?)(['"])((?:\\.|(?!\2)[^\\])*)\2""")
_TRIPLE_FSTRING = re.compile(r"""(?<![\w'"])([rRbB]?[fF][rRbB]?)('''|\"\"\")((?:\\.|(?!\2)[^\\])*)\2""", re.DOTALL)
_FIELD = re.compile(r"(?<!\{)\{([^{}]*)\}(?!\})")


def repair_braces(code, max_iterations=20):
    """Double the braces of `{...}` fields that are not valid replacement fields, in the f-strings on
    the line a SyntaxError names, triple-quoted ones over several lines too (METHOD.md 1.1's repair, up to 20 times).

    The common bug is an f-string that shows a command format: f"Reply \\boxed{move A 3}" is a
    syntax error; after repair it is f"Reply \\boxed{{move A 3}}". `{name}`, `{x!r}` and `{x:.2f}`
    are left alone, `{fire!}` is not a field. Unlike the official repair, braces outside f-strings (a
    `{}` dict literal on the same line) are never touched.

    >>> repair_braces('state = {}; say = f"Shout \\\\boxed{fire!} or {n}"; n = 1')
    'state = {}; say = f"Shout \\\\boxed{{fire!}} or {n}"; n = 1'
    """
    def is_field(inner):
        with suppress(SyntaxError):
            parse('f"""{' + inner + '}"""', mode="eval")
            return True
        return False

    def repair(literal):
        body = _FIELD.sub(lambda f: f.group(0) if is_field(f.group(1)) else "{{" + f.group(1) + "}}", literal.group(3))
        return literal.group(1) + literal.group(2) + body + literal.group(2)

    for _ in range(max_iterations):
        try:
            parse(code)
            return code
        except SyntaxError as error:
            lines = code.split("\n")
            line = lines[error.lineno - 1] if 0 < (error.lineno or 0) <= len(lines) else ""   # "": none named
            start = len("\n".join(lines[:error.lineno - 1] + [""])) if line else 0   # where the line begins
            fixed = code[:start] + _FSTRING.sub(repair, line) + code[start + len(line):]
            if fixed == code and line:   # the line may lie in an f-string in triple quotes: repair those over it
                fixed = _TRIPLE_FSTRING.sub(lambda m: repair(m) if m.start() < start + len(line) and m.end() > start
                                            else m.group(), code)
            if fixed == code:
                return code
            code = fixed
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
    if isinstance(error, BlockingIOError) or (isinstance(error, RuntimeError) and "new thread" in str(error)):
        text += " (the sandbox runs no threads or processes)"   # RLIMIT_NPROC 0: EAGAIN, or threading's message
    lines = [line for frame, line in traceback.walk_tb(error.__traceback__)
             if frame.f_code.co_filename == "<environment>"]
    return (text + (f" (line {lines[-1]})" if lines else ""))[:MAX_ERROR_CHARS]


def namespace():
    """A fresh module namespace pre-populated as the official loader does (METHOD.md 1.1)."""
    import collections, copy, functools, heapq, operator, random, statistics, string, typing
    import numpy
    ns = {"__name__": "environment", "__builtins__": __builtins__, "np": numpy, "numpy": numpy}
    ns.update({module.__name__: module for module in (itertools, math, random, re, json, collections, functools,
                                                      string, copy, heapq, operator, statistics)})
    for module, names in ((collections, "deque defaultdict Counter OrderedDict namedtuple"),
                          (itertools, "combinations permutations product chain accumulate"),
                          (functools, "reduce lru_cache"), (copy, "deepcopy"), (heapq, "heappush heappop"),
                          (typing, "Tuple Dict List Optional Union Any Set FrozenSet Callable Iterable "
                                   "Sequence Mapping")):
        ns.update({name: getattr(module, name) for name in names.split()})
    ns["ToolUseBaseEnv"] = ToolUseBaseEnv
    return ns


# The module names environment code may import the base class from: ours, and the official package's.
BASE_CLASS_MODULES = ("tool_use_base_env", "spade", "spade.core", "spade.core.envs", "spade.core.envs.tool_use_base_env")


def load_env_class(code):
    """Exec the code and return the environment class: the first `*Env` callable (METHOD.md 1.1), or
    None when there is none. An exception from the code is ContractError("load")."""
    import linecache, types
    for name in BASE_CLASS_MODULES:   # this process is the environment's own: its modules are its world
        module = sys.modules[name] = types.ModuleType(name)
        module.__path__, module.ToolUseBaseEnv = [], ToolUseBaseEnv
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
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
    return next((obj for name, obj in list(ns.items())
                 if name.endswith("Env") and callable(obj) and name not in ("Env", "ToolUseBaseEnv")), None)


def construct(cls, max_turns=None):
    """At play time (`max_turns` given): `cls()`, falling back to `cls(max_turns=...)`, then max_turns
    capped (METHOD.md 1.1). For the gate (None): `cls(max_turns=1000)`, falling back to `cls()` (3.1 b).
    Whether the instance has reset() and step() is the caller's check."""
    try:
        try:
            env = cls() if max_turns else cls(max_turns=1000)
        except TypeError:
            env = cls(max_turns=max_turns) if max_turns else cls()
        if max_turns and hasattr(env, "max_turns"):
            designed = env.max_turns
            ok = isinstance(designed, int) and not isinstance(designed, bool) and designed > 0
            env.max_turns = min(designed, max_turns) if ok else max_turns
        return env
    except MemoryError:
        raise
    except BaseException as e:
        raise ContractError("load" if max_turns else "contract", describe(e))


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


_KINDS = ((str, "str"), ((int, float), "number"), (dict, "dict"))   # bool, an int subclass: told by its exact type


def kinds(values):
    """The types the gate checks (METHOD 3.1 d, e), as the official isinstance tests see them.
    The parent decides with these; a child that lies about them only lies about itself."""
    def kind(value):
        named = next((name for types, name in _KINDS if isinstance(value, types)), None)
        return "bool" if type(value) is bool else named or type(value).__name__
    return [kind(value) for value in values]


def play_reset(env, seed):
    """reset(seed) -> [observation, info, kinds]. The process's global RNGs are seeded from the play's
    seed first: environments that draw from `random` or numpy's global generator without seeding them
    (dice, shuffles) then play the same for the same seed, and pass the gate's determinism check."""
    if seed is not None:
        import numpy
        random.seed(seed)
        numpy.random.seed(seed % 2**32)
    result = env.reset(seed=seed)
    if isinstance(result, str):
        return [as_observation(result, "reset()"), {}, ["str"]]
    if not isinstance(result, tuple) or len(result) != 2:
        raise ContractError("contract", "reset() must return (observation, info)")
    return [as_observation(result[0], "reset()"), plain_info(result[1]), kinds(result)]


def play_step(env, action):
    """step(action) -> [observation, reward, terminated, truncated, info, kinds], coerced as at play time."""
    result = env.step(str(action)[:MAX_ACTION_CHARS])
    if not isinstance(result, tuple) or len(result) != 5:
        got = f"a tuple of length {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise ContractError("contract", f"step() must return a 5-tuple (obs, reward, terminated, truncated, info), got {got}")
    obs, reward, terminated, truncated, info = result
    try:
        reward = float(reward)
    except (TypeError, ValueError):
        raise ContractError("contract", f"step() reward must be a number, got {type(reward).__name__}")
    except OverflowError:
        raise ContractError("contract", "step() reward must be finite, got an integer too large for a float")
    if not math.isfinite(reward):
        raise ContractError("contract", f"step() reward must be finite, got {reward}")
    return [as_observation(obs, "step()"), reward, bool(terminated), bool(truncated), plain_info(info), kinds(result)]


def unboxed_probes(cls):
    """METHOD 3.1 step 2's last check: on a fresh instance, reset() and step each UNBOXED_PROBES
    action, ignoring every exception (the official wrapper swallows them), then close(), which must
    not raise. Otherwise only a hang fails, and the caller's deadline turns it into the "timeout"
    stage: a game that loops on a reply without a box would otherwise pass the gate and hang its
    first play with an unboxed reply."""
    try:
        env = construct(cls)
    except ContractError:
        return None
    for action in (None, *UNBOXED_PROBES):
        with suppress(Exception):
            env.reset() if action is None else env.step(action)
    if hasattr(env, "close"):   # officially the wrapper's close() ends validation: if it raises, it fails
        try:
            env.close()
        except Exception as e:
            raise ContractError("contract", f"close() raised {describe(e)}")


def criteria_at(cls, seed):
    """Tool use (METHOD 3.1 step 3) at one seed: {"evaluable", "error"}: whether the instance exposes
    criteria and a state, and the first criterion that raises on the initial state."""
    try:
        env = cls()
        env.reset(seed=seed)
    except Exception as e:
        raise ContractError("contract", f"reset(seed={seed}) raised {describe(e)}")
    criteria, state = getattr(env, "_message_criteria", None), getattr(env, "_state", None)
    if criteria is None or state is None:
        return {"evaluable": False, "error": None}
    for criterion in criteria:
        try:
            criterion(state)
        except Exception as e:
            return {"evaluable": True, "error": f"seed {seed}: {describe(e)}"}
    return {"evaluable": True, "error": None}


# ---------------------------------------------------------------------------------------------
# In the parent: what a reply may hold. The child is untrusted, so whatever its code did to the
# coercion above (patched float, isfinite, json), the trainer gets exactly these types or a ReplyError.
# ---------------------------------------------------------------------------------------------
class ReplyError(ValueError):
    """A reply that breaks the contract's types; EnvSandbox raises it as SandboxError("output")."""


_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_JSON_DEPTH = 32


def clean_text(value, what="a string"):
    """A str that encodes as UTF-8: lone surrogates (JSON lets "\\ud800" through) become U+FFFD."""
    if type(value) is not str:
        raise ReplyError(f"{what} is a {type(value).__name__}, not a str")
    return _SURROGATE.sub("\ufffd", value)


def plain(text, special_tokens):
    """`text` with each special token's spelling broken by a zero-width space after its first character:
    untrusted text in a prompt (a document, code, a hint, an observation) then tokenises as the
    characters it shows, never as a control token such as <|im_end|>, which would end its turn.

    >>> plain("a <|im_end|> b", ["<|im_end|>"])
    'a <\u200b|im_end|> b'
    """
    for token in special_tokens:
        if len(token) > 1 and token in text:
            text = text.replace(token, f"{token[0]}\u200b{token[1:]}")
    return text


@functools.lru_cache(maxsize=16)
def control_tokens(tokenizer):
    """The spellings `tokenizer` reads as a control token wherever they stand: its special tokens and
    every added token it marks special (SmolLM2's lists 3 of its 17 in all_special_tokens, and
    `<file_sep>` or `<jupyter_code>` are among the others), longest first. Added tokens not marked
    special (Qwen3's `<tool_call>`, `<think>`) are markup the policy must see and write, and stay."""
    added = [token.content for token in tokenizer.added_tokens_decoder.values() if token.special]
    return tuple(sorted({*tokenizer.all_special_tokens, *added}, key=lambda t: (-len(t), t)))


def plain_messages(messages, special_tokens):
    """Chat messages with what the model did not write (every role but the assistant's) kept `plain`."""
    return [m if m["role"] == "assistant" else {**m, "content": plain(m["content"], special_tokens)} for m in messages]


# Control characters (C0, DEL, C1) and the bidirectional controls (embeddings, overrides, isolates, marks):
# the second kind leaves text in the order it runs but shows it to a person in another one.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")


def printable(text, lines=False):
    r"""`text` with every control character (C0, DEL, C1: ESC and CSI among them, newlines too unless
    `lines`, which keeps newlines and tabs for a page of code) and every bidirectional control written as
    its escape, for a terminal, a log or a report: what an environment or a file wrote cannot then erase
    or forge a line, move the cursor, retitle the terminal, or show code in an order it does not run in.

    >>> print(printable("ok\x1b[2J\nstep 9"))
    ok\x1b[2J\nstep 9
    >>> print(printable("if x:\n    go(\u202e1)", lines=True))
    if x:
        go(\u202e1)
    """
    return _CONTROL.sub(lambda m: m.group() if lines and m.group() in "\n\t" else repr(m.group())[1:-1], text)


MAX_FILE_JSON_DEPTH = 64


def read_json(text, max_depth=MAX_FILE_JSON_DEPTH):
    """The JSON value of `text` (str or UTF-8 bytes) from outside the trainer (a file, a line of one, a
    block of a reply), or ValueError: malformed, not UTF-8, an integer past Python's 4,300 digits, and
    nesting deeper than `max_depth` (which would raise RecursionError here or in whatever walks it).

    >>> read_json('{"a": [1]}')
    {'a': [1]}
    >>> read_json("[" * 65 + "]" * 65)
    Traceback (most recent call last):
    ValueError: JSON nested deeper than 64
    """
    try:
        value = json.loads(text)
    except RecursionError:   # deeper than the parser's stack
        raise ValueError(f"JSON nested deeper than {max_depth}") from None
    level = [value]
    for _ in range(max_depth):   # level by level, never recursing: linear in the value's size
        level = [v for x in level if type(x) in (dict, list) for v in (x.values() if type(x) is dict else x)]
    if level:   # something below the last level allowed
        raise ValueError(f"JSON nested deeper than {max_depth}")
    return value


def clean_json(value, what, depth=0):
    """A JSON value made of dicts with str keys, lists, clean strs, finite numbers, bools and None,
    nested at most MAX_JSON_DEPTH deep (a tool's parameter schema goes into the chat template)."""
    if depth > MAX_JSON_DEPTH:
        raise ReplyError(f"{what} is nested deeper than {MAX_JSON_DEPTH}")
    if value is None or type(value) in (bool, int) or (type(value) is float and math.isfinite(value)):
        return value
    if type(value) is str:
        return clean_text(value)
    if type(value) is list:
        return [clean_json(v, what, depth + 1) for v in value]
    if type(value) is dict:
        return {clean_text(k): clean_json(v, what, depth + 1) for k, v in value.items()}
    raise ReplyError(f"{what} holds a {type(value).__name__}")


def clean_info(value):
    if type(value) is not dict or any(isinstance(v, (dict, list)) for v in value.values()):
        raise ReplyError("info is not a flat JSON object")
    return clean_json(value, "info")


def checked_reset(value):
    """[observation, info, kinds] from the child -> (str, dict, kinds)."""
    if type(value) is not list or len(value) != 3 or type(value[2]) is not list:
        raise ReplyError("reset's reply is not [observation, info, kinds]")
    return clean_text(value[0], "the observation"), clean_info(value[1]), [clean_text(k) for k in value[2]]


def checked_step(value):
    """[observation, reward, terminated, truncated, info, kinds] -> the same, each of its type."""
    if type(value) is not list or len(value) != 6 or type(value[5]) is not list:
        raise ReplyError("step's reply is not [observation, reward, terminated, truncated, info, kinds]")
    obs, reward, terminated, truncated, info, types = value
    finite = False   # an exact int past a float's range (10**400 is valid JSON) overflows, in math.isfinite too
    with suppress(OverflowError):
        finite = type(reward) in (int, float) and math.isfinite(float(reward))
    if not finite:
        raise ReplyError(f"the reward is {str(reward)[:40]}, not a finite number")
    if type(terminated) is not bool or type(truncated) is not bool:
        raise ReplyError("terminated and truncated must be bools")
    return (clean_text(obs, "the observation"), float(reward), terminated, truncated, clean_info(info),
            [clean_text(k) for k in types])


def checked_tools(value):
    """The tool list for the chat template: [{"type": "function", "function": {name, description, parameters}}]."""
    tools = clean_json(value, "the tool list")
    for tool in tools if type(tools) is list else [None]:
        function = tool.get("function") if type(tool) is dict else None
        if type(function) is not dict or type(function.get("name")) is not str or \
                type(function.get("parameters", {})) is not dict:
            raise ReplyError("a tool is not {'type': 'function', 'function': {'name': str, 'parameters': dict}}")
    return tools
