"""The designer's gate (METHOD.md 3.1): is a designer's response a playable environment?

    validate_env(response_text)  ->  Validation(ok, stage, error, class_name, code)

Extraction and brace repair (contract.py, in the trainer, linear in the text), a syntax check, then
METHOD 3.1 step 2 (a-f and the unboxed probes with close()) and step 3 (the criteria of tool-use
environments) in one sandbox, plus a determinism check and a play's construction in a second one (a
fresh process, as each play has, started beside the first and given the code once the first is
gone); 30 s a request, 120 s in all. A
sandbox's child only answers ordinary requests (load, construct, reset, step, ...); every verdict is
decided here, from replies that sandbox/ has already type-checked, so code that forges its replies
can only pass by answering like a working environment, which it then has to do in its plays as well.
Where the gate is stricter than the official one: METHOD.md 14.
"""
import time
from dataclasses import dataclass

from sandbox.contract import (PLAY_MAX_TURNS, REWARD_RANGE, VALIDATION_PROBES, ReplyError, checked_reset, checked_step,
                              checked_tools, clean_text, extract_code, parse, printable, repair_braces)
from sandbox import EnvSandbox, SandboxError


@dataclass
class Validation:
    ok: bool
    stage: str          # "passed", or where it failed: syntax exec class construct interface reset tools
    error: str          # step reseed determinism close criteria, timeout memory crash output,
                        # or audit (designer.audited, tool use)
    class_name: str
    code: str           # after extraction and brace repair


class Rejected(Exception):
    """The gate's verdict against the code: `kind` names the stage that rejected it, as a SandboxError's
    kind names what failed; the message is printable, since it may quote what the environment wrote."""

    def __init__(self, kind, message):
        self.kind, self.message = kind, printable(message)
        super().__init__(self.message)


def validate_env(code, *, max_turns=PLAY_MAX_TURNS, timeout_s=120.0, call_timeout_s=30.0, memory_mb=1024):
    """The gate on a designer's response; never raises for anything the code does. Each request has a
    play's `call_timeout_s`, and the whole gate `timeout_s`; `max_turns` is the plays' turn cap (a run's
    --max-turns), which a play's construction is checked with."""
    code = clean_text(extract_code(code))
    try:   # the parser raises RecursionError or MemoryError, not SyntaxError, on code nested 10^5 deep
        code = repair_braces(code)
        parse(code)
    except SyntaxError as e:
        return Validation(False, "syntax", printable(f"SyntaxError: {e.msg} (line {e.lineno})"), "", code)
    except (RecursionError, MemoryError, ValueError) as e:
        return Validation(False, "syntax", f"{type(e).__name__}: the code cannot be parsed", "", code)
    deadline = time.monotonic() + timeout_s
    try:
        # Two processes start side by side, each in a slot of its own, as a game's plays do: what the kernel
        # numbers per process (its /tmp's device, its mounts) differs between them as it does between plays.
        # The second loads the code only once the first is gone: no live process can hand it a value.
        start_s = max(0.1, min(call_timeout_s, timeout_s))
        with EnvSandbox(None, timeout_s=start_s, memory_mb=memory_mb) as first, \
                EnvSandbox(None, timeout_s=start_s, memory_mb=memory_mb) as second:
            turns = iter([first, second])
            def sandbox():
                box = next(turns)
                if box is second:
                    first.close()
                return _sender(box, deadline, call_timeout_s, timeout_s)
            return Validation(True, "passed", "", checks(sandbox, code, max_turns), code)
    except (SandboxError, Rejected) as e:
        return Validation(False, e.kind, e.message, "", code)


def _sender(box, deadline, call_timeout_s, timeout_s):
    """`send(op, **request)` through `box`: each request within a play's `call_timeout_s` and the gate's
    `deadline` (its `timeout_s`), whose running out is said as such."""
    def send(op, **request):
        try:
            return box.request(op, deadline=min(deadline, time.monotonic() + call_timeout_s), **request)
        except SandboxError as e:
            if e.kind == "timeout" and time.monotonic() >= deadline:
                raise SandboxError("timeout", f"the gate's {timeout_s:g} s ran out during {op}") from None
            raise
    return send


def checks(sandbox, code, max_turns):
    """The gate's requests and its verdicts: the class name, or Rejected(stage, why). `sandbox()` gives
    the `send(op, **request)` (EnvSandbox.request) of a fresh process, once the one before is gone. A
    reply of the wrong shape is the stage "output"."""
    send = sandbox()
    loaded = _call(send, "exec", "load", code=code)
    _require("class", type(loaded) is dict and type(loaded.get("class")) is str,
             "no class whose name ends in 'Env' was defined")
    env, replies = _opening(send)
    _reset(send, env, 123, "reseed")
    _call(send, stage="close", op="probe")   # the unboxed probes, which end in close(): it must not raise
    if loaded.get("tool_use") is True:
        _criteria(send)
    other = sandbox()   # a process of its own, as each play has: nothing the first instance left is there
    _call(other, "determinism", "load", code=code)
    again = _opening(other, "determinism")[1]
    _require("determinism", again == replies, lambda: _difference(replies, again))
    _new_instance(other, max_turns)   # as a play constructs it, with the run's turn cap
    return clean_text(loaded["class"])


def _call(send, stage, op, check=None, **request):
    """`send(op, **request)`'s value, passed through `check` (a contract.checked_*) where given; a failure
    is Rejected at `stage`, or at what failed (timeout, memory, crash, output)."""
    try:
        value = send(op, **request)
    except SandboxError as e:
        raise Rejected(stage if e.kind in ("load", "contract") else e.kind, e.message)
    try:
        return check(value) if check else value
    except ReplyError as e:
        raise Rejected("output", f"{stage}: {e}")


def _require(stage, ok, message):
    if not ok:
        raise Rejected(stage, message() if callable(message) else message)


def _new_instance(send, max_turns=None):
    """An instance as the gate constructs it (3.1 b), or as a play does (`max_turns`): its index."""
    value = _call(send, "construct", "construct", max_turns=max_turns)
    _require("output", type(value) is list and len(value) == 2 and type(value[0]) is int
             and type(value[1]) is list and all(type(m) is str for m in value[1]), "construct: a malformed reply")
    _require("interface", not value[1], lambda: f"the environment has no {value[1][0]}() method")
    return value[0]


def _reset(send, env, seed, stage):
    obs, _, types = _call(send, stage, "reset", checked_reset, env=env, seed=seed)
    _require(stage, types in (["str"], ["str", "dict"]) and obs.strip(),
             f"reset(seed={seed}) must return (non-empty str, dict) or a non-empty str")
    return obs


def _opening(send, stage=None):
    """3.1 b-e: an instance, and what a play is shown of it: its first observation, its tool list and its
    replies to the probes. A failure is the stage of the check that failed (reset, tools, step), or
    `stage` for all of them."""
    reset, tools, step = (stage,) * 3 if stage else ("reset", "tools", "step")
    env = _new_instance(send)
    replies = [_reset(send, env, 42, reset), _call(send, tools, "tools", checked_tools)]
    low, high = REWARD_RANGE
    for probe in VALIDATION_PROBES:
        obs, reward, terminated, truncated, _, types = _call(send, step, "step", checked_step, env=env, action=probe)
        _require(step, types[:1] == ["str"] and types[1:2] in (["number"], ["bool"])
                 and types[2:] == ["bool", "bool", "dict"],
                 lambda: f"step({probe!r}) must return (str, int|float, bool, bool, dict), got ({', '.join(types)})")
        _require(step, low <= reward <= high, f"step({probe!r}) reward {reward} is outside [{low:g}, {high:g}]")
        replies.append([obs, reward, terminated, truncated])
        if terminated or truncated:
            break
    return env, replies


def _difference(first, again):
    """What the determinism check saw differ: the first observation, the tool list or the reply to a probe."""
    i = next(i for i in range(max(len(first), len(again))) if first[i:i + 1] != again[i:i + 1])
    if i < 2:
        return (f"reset(seed=42) of a fresh instance in a process of its own gave another "
                f"{('first observation', 'tool list')[i]}")
    probe = VALIDATION_PROBES[i - 2]
    return f"a fresh instance in a process of its own, reset with seed 42, answered step({probe!r}) otherwise"


def _criteria(send):
    """METHOD 3.1 step 3: a tool-use environment is rejected when, at every seed (0, 1, 2) whose criteria
    are evaluable, some criterion raises on the initial state; one without criteria passes."""
    results = [_call(send, "criteria", "criteria", seed=seed) for seed in (0, 1, 2)]
    _require("output", all(type(r) is dict and type(r.get("evaluable")) is bool
                           and type(r.get("error")) in (str, type(None)) for r in results), "criteria: a malformed reply")
    raising = [clean_text(r["error"]) for r in results if r["evaluable"] and r["error"] is not None]
    evaluable = sum(r["evaluable"] for r in results)
    _require("criteria", not evaluable or len(raising) < evaluable,
             lambda: "a success criterion raises on the initial state at every seed: " + "; ".join(raising))
