"""What every benchmark file shares: run options, prompts through the chat template, sampling in
batches through engine.py, reading user-supplied JSONL, and the avg@k / pass@k arithmetic.

A benchmark file exposes `evaluate(engine, tokenizer, options) -> dict` returning
`{"columns": {table column: percent}, "metrics": {...}, "settings": {...}, "samples": [...]}`, or
raises `Unavailable` with one sentence saying what is missing. Nothing here catches exceptions.
"""

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from backend.engine import SamplingParams


class Unavailable(Exception):
    """This benchmark cannot run here (data, harness or endpoint missing); the message says what."""


@dataclass
class Options:
    """The command line, as the benchmark files see it (eval/run.py documents each flag)."""
    samples: int | None = None  # samples per problem; None = the benchmark's own (AIME 32, GPQA 8, ...)
    limit: int | None = None  # first N problems (RG: first N tasks of each bucket; BFCL: per category)
    max_new_tokens: int | None = None  # None = the benchmark's own budget
    turns: int | None = None  # BFCL: the first N user turns of each entry; None = all
    aime_sampling: str = "avg32"  # AIME: "avg32" (the paper's column) or "offline" (the official driver's)
    batch_size: int = 32  # prompts per engine.generate call
    seed: int = 0
    paths: dict = field(default_factory=dict)  # user data: {"aime2026": ..., "lcb": ..., "gpqa": ...}
    endpoints: dict = field(default_factory=dict)  # {"agent": url, "user": url, "user_model": name}
    progress: object = None  # the running benchmark's tqdm bar of completions (eval/run.py makes one each)
    date_window: tuple | None = None  # LiveCodeBench: ("YYYY-MM-DD", "YYYY-MM-DD"), contest dates kept, both days in


@dataclass
class Problem:
    id: str
    messages: list  # the chat the model sees
    reference: object  # whatever the benchmark's scorer needs (label, tests, RG entry, ...)


def sampling(defaults: SamplingParams, options: Options) -> SamplingParams:
    """The benchmark's own sampling settings with `--max-new-tokens` applied.

    >>> sampling(SamplingParams(temperature=0.7, max_new_tokens=32768), Options(max_new_tokens=64)).max_new_tokens
    64
    """
    if options.max_new_tokens is None:
        return defaults
    return dataclasses.replace(defaults, max_new_tokens=options.max_new_tokens)


def first(items: list, limit: int | None) -> list:
    """`--limit`: the first `limit` items (all of them when limit is None or 0).

    >>> first([1, 2, 3], 2), first([1, 2, 3], None), first([1, 2, 3], 0)
    ([1, 2], [1, 2, 3], [1, 2, 3])
    """
    return items[:limit] if limit else items


def chat_prompt(tokenizer, messages: list, tools: list | None = None) -> list[int]:
    """Token ids of `messages` rendered by the model's chat template, ready for the assistant turn.

    Encoded without special tokens: the template already wrote them (a second BOS would shift a
    model's answers away from what it was trained on).
    """
    kwargs = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


def generate_texts(engine, prompts: list[list[int]], params: SamplingParams, options: Options) -> list[dict]:
    """One completion per prompt, in batches of `options.batch_size`: `{"response", "finish_reason",
    "num_tokens"}`, reproducible from `options.seed`.

    A batch is seeded by the offset of its first prompt, `options.seed + start`. The trap: the vLLM
    engine gives request j of a call the seed `params.seed + j`, so seeding batch i with `seed + i`
    made consecutive batches share all but one seed, and the copies of one problem that straddle a
    batch boundary came out identical (half of AIME's 64 samples at batch 32). With the offset, the
    prompt at position p of the whole list always samples with `options.seed + p`.
    """
    out = []
    if options.progress is not None:   # a multi-turn benchmark asks for more as its dialogues go on
        options.progress.total += len(prompts)
        options.progress.refresh()
    for start in range(0, len(prompts), options.batch_size):
        batch_params = dataclasses.replace(params, seed=options.seed + start)
        for completion in engine.generate(prompts[start:start + options.batch_size], batch_params):
            text = engine.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
            out.append({"response": text, "finish_reason": completion.finish_reason,
                        "num_tokens": len(completion.token_ids)})
        if options.progress is not None:
            options.progress.update(len(prompts[start:start + options.batch_size]))
    return out


def sample_and_score(engine, tokenizer, problems: list[Problem], params: SamplingParams, num_samples: int,
                     options: Options, score) -> list[dict]:
    """`num_samples` completions of every problem, each scored by `score(reference, response) ->
    (extracted answer, score in [0, 1], detail str)`. Returns one row per sample for the JSONL."""
    assert num_samples >= 1, f"need at least one sample per problem, got {num_samples}"
    prompts = [chat_prompt(tokenizer, p.messages) for p in problems for _ in range(num_samples)]
    generated = generate_texts(engine, prompts, params, options)
    rows = []
    for k, gen in enumerate(generated):
        problem = problems[k // num_samples]
        extracted, value, detail = score(problem.reference, gen["response"])
        rows.append({"problem_id": problem.id, "sample": k % num_samples, "prompt": problem.messages,
                     **gen, "extracted": extracted, "score": value, "detail": detail})
    return rows


def avg_and_pass(rows: list[dict]) -> dict:
    """avg@k = mean score over every (problem, sample); pass@k = share of problems with a full score.

    >>> avg_and_pass([{"problem_id": "a", "score": 1.0}, {"problem_id": "a", "score": 0.0},
    ...               {"problem_id": "b", "score": 0.0}, {"problem_id": "b", "score": 0.0}])
    {'avg_at_k': 0.25, 'pass_at_k': 0.5, 'num_problems': 2, 'num_samples': 4}
    """
    by_problem = {}
    for row in rows:
        by_problem.setdefault(row["problem_id"], []).append(row["score"])
    return {"avg_at_k": sum(r["score"] for r in rows) / len(rows) if rows else math.nan,
            "pass_at_k": sum(max(s) >= 1.0 for s in by_problem.values()) / len(by_problem) if rows else math.nan,
            "num_problems": len(by_problem), "num_samples": len(rows)}


def percent(fraction: float) -> float:
    """A table cell: percent with one decimal, as in the paper's tables.

    >>> percent(0.47368)
    47.4
    """
    return round(100.0 * fraction, 1)


def read_jsonl(path, what: str) -> tuple[list[dict], int]:
    """The rows of a user-supplied JSONL file and how many lines were skipped. A missing file is
    `Unavailable`; a malformed line is skipped and counted, with one warning saying how many and where."""
    path = Path(path)
    if not path.is_file():
        raise Unavailable(f"{what}: {path} is a folder, not a file" if path.is_dir()
                          else f"{what}: the file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8-sig")   # a BOM is no part of the first row
    except (OSError, UnicodeDecodeError) as e:
        raise Unavailable(f"{what}: {path} cannot be read as UTF-8 text ({e})") from None
    rows, bad = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):   # not JSON, or nested past the parser's depth
            bad.append(number)
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(number)
    if bad:
        print(f"warning: {what}: skipped {len(bad)} malformed line(s) of {path} (first: line {bad[0]})")
    if not rows:
        raise Unavailable(f"{what}: {path} holds no usable JSON lines")
    return rows, len(bad)
