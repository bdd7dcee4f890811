"""The environment contract where it must behave as the official code does (METHOD.md 1.1, 1.3, 3.1):
the tool-use base class, the brace repair and the gate's close() check. Inputs and expected outcomes
are the official implementation's, restated here; the base class runs in this process (it is plain
Python) and, for the gate, in a sandbox.
"""
import ast
import gc
import textwrap
import threading
import time

import pytest

from sandbox.contract import ToolUseBaseEnv, extract_code, parse, repair_braces
from gate import validate_env
from test_sandbox import EXAMPLES


class Desk(ToolUseBaseEnv):
    """A test double of a designer's environment: one listed tool, one unlisted, answer "done"."""

    def reset(self, seed=None):
        self._tools = {"look": {"description": "Look at x.", "parameters": {"type": "object"}}}
        self._expected_answer = "done"
        return "Look, then answer.", {}

    def tool_look(self, x):
        return f"saw {x}"

    def tool_hidden(self):
        return "found"

    def solution(self):
        return "look x=1, then <answer>done</answer>"


class ExactDesk(Desk):
    def _check_answer(self, answer):   # compares exactly: officially it gets the stripped answer
        return answer == "done"


def test_an_answer_reaches_check_answer_stripped():
    assert ExactDesk().step("<answer> done </answer>")[:3] == ("Correct!", 1.0, True)


@pytest.mark.parametrize("expected, answer, correct", [("0", "0.01", False), ("0.25", "0.2421875", True),
                                                       ("$1,000", "1000", True), ("Done", " done ", True)])
def test_answer_tolerance_is_strictly_below_a_hundredth(expected, answer, correct):
    desk = Desk()
    desk._expected_answer = expected
    assert desk._check_answer(answer) is correct


def test_a_tool_call_without_a_name_is_an_unknown_tool_not_a_format_error():
    observation, reward, terminated, truncated, _ = Desk().step('<tool_call>{"arguments": {}}</tool_call>')
    assert (reward, terminated, truncated) == (0.0, False, False) and observation.startswith("Unknown tool ''")


def test_only_arguments_are_read_and_any_tool_method_dispatches():
    desk = Desk()
    observation = desk.step('<tool_call>{"name": "look", "parameters": {"x": 1}}</tool_call>')[0]
    assert observation.startswith("Tool result:\nError calling look: TypeError")   # `parameters` is not read
    assert desk.execute_tool("hidden", {}) == {"output": "found", "returncode": 0}   # not in _tools
    assert desk.execute_tool("look", {"x": 2})["output"] == "saw 2"
    assert desk._call_history == [{"name": "hidden", "arguments": {}, "result": "found"},
                                  {"name": "look", "arguments": {"x": 2}, "result": "saw 2"}]
    assert desk.execute_tool("nothing", {})["returncode"] == 1


def test_not_json_or_not_an_object_is_a_format_error():
    for call in ("{not json}", "[1, 2]", '{"name": "look", "arguments": {"x": ' + "[" * 5000 + "]" * 5000 + "}}"):
        assert Desk().step(f"<tool_call>{call}</tool_call>")[1] == -0.1


def test_the_last_turn_is_truncated_and_shows_the_solution():
    desk = Desk(max_turns=1)
    observation, reward, terminated, truncated, _ = desk.step("<answer>wrong</answer>")
    assert (reward, terminated, truncated) == (0.0, False, True) and observation.endswith(desk.solution())


def test_the_base_class_has_solution_close_and_obs_suffix():
    class Bare(ToolUseBaseEnv):
        def reset(self, seed=None):
            return "x" + self._obs_suffix(), {}
    bare = Bare(max_turns=1)
    assert bare.reset() == ("x", {}) and bare.close() is None
    with pytest.raises(NotImplementedError):
        bare.step("no tag")   # the last turn shows solution(), which the subclass must implement


def test_a_close_that_raises_fails_the_gate():
    code = (EXAMPLES / "vault_dial.py").read_text().replace(
        "    def close(self):\n        pass", "    def close(self):\n        raise RuntimeError('leaked')")
    assert "raise RuntimeError('leaked')" in code
    result = validate_env(code)
    assert (result.ok, result.stage) == (False, "close") and "leaked" in result.error


@pytest.mark.parametrize("broken, repaired", [
    ('say = f"Shout \\\\boxed{fire!} to win"', 'say = f"Shout \\\\boxed{{fire!}} to win"'),
    ('state = {}; say = f"Reply \\\\boxed{go now} in {state}"', 'state = {}; say = f"Reply \\\\boxed{{go now}} in {state}"'),
    ("say = f'Reply \\\\boxed{} now'", "say = f'Reply \\\\boxed{{}} now'"),
    ('say = f"{x!r} {x:>{w}} {x=}" + f"\\\\boxed{move 1}"', 'say = f"{x!r} {x:>{w}} {x=}" + f"\\\\boxed{{move 1}}"'),
])
def test_brace_repair_fixes_fstrings_and_leaves_the_rest(broken, repaired):
    assert repair_braces(broken) == repaired
    ast.parse(repaired)


def test_brace_repair_fixes_triple_quoted_fstrings_on_the_named_line_and_across_lines():
    # A designer's observation text is often an f-string in triple quotes over several lines; the line the
    # SyntaxError names is then inside it, with no f-prefix on it (METHOD.md 1.1: "the f-strings on the line").
    broken = textwrap.dedent('''\
        state = {}
        say = f"""Reply \\boxed{move A 3} now"""
        def observe(n):
            return f"""Turn {n} of {len(state)}.
        Reply \\boxed{move A 3} or \\boxed{open it}.
        """''')
    repaired = repair_braces(broken)
    assert repaired == broken.replace("boxed{move A 3}", "boxed{{move A 3}}").replace("{open it}", "{{open it}}")
    ast.parse(repaired)


def test_brace_repair_leaves_code_it_cannot_fix():
    broken = textwrap.dedent("""\
        def f(:
            return {}""")
    assert repair_braces(broken) == broken


class Finalised:
    """A cycle whose finaliser lets another thread run: what a collected EnvSandbox does mid-parse."""

    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(0)


def test_the_trainers_parses_take_turns_across_threads():
    """validate_env runs in thread pools (design(), load_pool). CPython 3.11's parser fails ("AST
    constructor recursion depth mismatch") when a collection mid-parse switches threads to another
    parse; contract.parse, which repair_braces and the gate use, holds a lock."""
    code = "\n".join(f"def f{i}(x):\n    return [[(x + {i}) * 2 for _ in range(3)] for _ in range(2)]"
                     for i in range(200))
    errors = []

    def work():
        for _ in range(12):
            try:
                parse(code)
            except SystemError as e:
                errors.append(e)
            Finalised()

    threshold = gc.get_threshold()
    gc.set_threshold(50, 1, 1)
    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*threshold)
    assert errors == []


def test_extract_code_takes_the_first_block():
    assert extract_code("text\n```python\na = 1\n```\n```python\nb = 2\n```") == "a = 1"
    assert extract_code("no block here") == "no block here"


def test_extract_code_is_the_official_regex():
    """The official pattern, `re.search(r"```python\\n(.*?)\\n```", text, re.DOTALL)`, without its
    quadratic search over openers that never close (thousands of them in one reply)."""
    import random
    import re
    rng, pieces = random.Random(0), ["```python\n", "\n```", "```", "```python", "\n", "x", "`"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        match = re.search(r"```python\n(.*?)\n```", text, re.DOTALL)
        assert extract_code(text) == (match.group(1) if match else text), text


def test_repair_braces_fixes_command_formats_only():
    broken = 'x = 3\nmsg = f"Reply \\\\boxed{move A 3} at turn {x} with {x:.1f}"\n'
    fixed = repair_braces(broken)
    assert "{{move A 3}}" in fixed and "{x}" in fixed and "{x:.1f}" in fixed
    compile(fixed, "<test>", "exec")
    assert repair_braces("a = {1: 2}\n") == "a = {1: 2}\n"
