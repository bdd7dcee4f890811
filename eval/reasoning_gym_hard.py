"""Reasoning Gym, hard split: 100 procedurally generated tasks in four buckets (the Table 1 columns
RG-Math, RG-Algo, RG-Cog, RG-Logic), generated and scored by the `reasoning-gym` package.

    python -m eval.run --model Qwen3-4B --suite games --benchmarks rg_hard

The split is `eval/rg_hard_split.json`: the bucket of each task and its hard configuration (the
reasoning_gym paper's Appendix A.3) plus the evaluation settings: 8 episodes per task, T 0.6,
top_p 0.8, top_k 20, 8192 new tokens, win = score >= 1 - 1e-9. As the official GEM evaluation:
- data: each task is a pool of 500 items, `reasoning_gym.create_dataset(task, **hard_config,
  size=500, seed=42)`, and an episode is one item drawn at random from it. The official draw uses
  the process's unseeded `random`; ours is seeded (`--seed`, and the task's name), so a run repeats.
- prompt: one user message, `PROMPT` (the question, an instruction to answer within `\\boxed{}`,
  then one to answer in `<answer>` tags), no system message.
- extraction (`extract_answer`): the last `<answer>...</answer>` (tags in any case), stripped; with
  none, the contents of the last `\\boxed{...}` (GEM's matcher: only the last `\\boxed`, braces
  balanced, else nothing).
- grading: the task's own `score_answer`; an episode whose item cannot be built, or whose scorer
  raises, is left out of its bucket's denominator, as the official evaluator leaves out an episode
  that raises. A bucket's win rate is its wins over its remaining episodes.

Containment: some scorers `eval` the answer or parse it with `sympy.parse_expr` (which evaluates
it). Those tasks (`SANDBOXED`) are scored in `sandbox.EnvSandbox`, one sandbox per answer, never in
this process; a sandbox that times out or dies is a loss (the official has no limit). One turn per
episode, as officially: the configuration allows two, but the environment ends an episode at its
first answer.
"""

import ast
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import reasoning_gym

from backend.engine import SamplingParams
from eval.common import Problem, Unavailable, first, percent, sample_and_score, sampling
from sandbox import EnvSandbox, SandboxError

SPLIT_PATH = Path(__file__).with_name("rg_hard_split.json")
COLUMNS = {"Math": "RG-Math", "Algorithmic": "RG-Algo", "Cognition": "RG-Cog", "Logic": "RG-Logic"}
POOL_SIZE, POOL_SEED = 500, 42  # GEM registers every rg:<task>-hard environment with these
WIN = 1.0 - 1e-9
# The official prompt (GEM's rg template around the environment's observation): protocol text.
PROMPT = ("Given a problem, your task is to answer the question by thinking step-by-step in a clear and specific "
          "manner.\nProblem: {question}\n\nPut your final answer within \\boxed{{}}.\nOnce you have thought about "
          "the reasoning process, provide the answer in the following format:\n<answer>answer here</answer>\n"
          "Do not explain your reasoning inside the answer tags, provide only the final answer. When an example "
          "is provided, you should strictly follow the format of the output/answer in that example.")
# Tasks whose score_answer evaluates the answer as Python: eval() or sympy's parse_expr.
SANDBOXED = {"binary_matrix", "n_queens", "spiral_matrix", "string_insertion",  # eval(answer)
             "countdown", "intermediate_integration", "polynomial_multiplication", "puzzle24",
             "simple_integration"}  # sympy.parse_expr(answer)
SANDBOX_TIMEOUT_S, SANDBOX_MEMORY_MB = 120.0, 2048
OPEN_TAG, CLOSE_TAG = re.compile("<answer>", re.IGNORECASE), re.compile("</answer>", re.IGNORECASE)
BRACE = re.compile("[{}]")


@dataclass
class Episode:
    bucket: str
    task: str
    config: dict
    index: int  # the item of the task's pool
    dataset: object
    entry: dict


def load_split(path=SPLIT_PATH) -> dict:
    split = json.loads(Path(path).read_text())
    tasks = [task for bucket in split["buckets"].values() for task in bucket]
    assert len(tasks) == len(set(tasks)), "a task appears in two buckets of the RG hard split"
    assert set(tasks) == set(split["hard_configs"]), "every RG task needs exactly one hard configuration"
    return split


def settings(split: dict) -> SamplingParams:
    s = split["settings"]
    return SamplingParams(temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"], max_new_tokens=s["max_tokens"])


def last_tagged(text: str) -> str | None:
    """What the official `<answer>\\s*(.*?)\\s*</answer>` (any case) finds last, stripped, in one
    pass: each opening tag pairs with the first closing tag after it, and the search goes on after
    that; an opening tag with no closing tag after it ends the search (no later one has one either).

    >>> last_tagged("<answer> 1 </answer> then <ANSWER>2<answer>3</Answer>"), last_tagged("<answer>4")
    ('2<answer>3', None)
    """
    found, position = None, 0
    while (opening := OPEN_TAG.search(text, position)) is not None:
        closing = CLOSE_TAG.search(text, opening.end())
        if closing is None:
            break
        found, position = text[opening.end():closing.start()].strip(), closing.end()
    return found


def last_boxed(text: str) -> str | None:
    """GEM's `extract_last_boxed_answer`: from the last `\\boxed`, up to the `}` that brings the brace
    count back to zero; the contents if that span starts with `\\boxed{`, else None.

    >>> last_boxed("\\\\boxed{1} \\\\boxed{\\\\frac{1}{2}}"), last_boxed("\\\\boxed{2} \\\\boxed 3"), last_boxed("\\\\boxed{4")
    ('\\\\frac{1}{2}', None, None)
    """
    start = text.rfind("\\boxed")
    if start < 0:
        return None  # GEM then looks for \fbox, whose span never starts with \boxed{
    depth = 0
    for brace in BRACE.finditer(text, start):
        depth += 1 if brace.group() == "{" else -1
        if brace.group() == "}" and depth == 0:
            return text[start + len("\\boxed{"):brace.start()] if text.startswith("\\boxed{", start) else None
    return None


def extract_answer(text: str) -> str | None:
    """The last `<answer>` span, else the last `\\boxed{}`'s contents, else None.

    >>> extract_answer("\\\\boxed{7} <answer>8</answer>"), extract_answer("\\\\boxed{7}"), extract_answer("7")
    ('8', '7', None)
    """
    tagged = last_tagged(text)
    return tagged if tagged is not None else last_boxed(text)


def draws(task: str, episodes: int, seed: int) -> list[int]:
    """The pool items of a task's episodes: drawn with replacement, as `random.choice` does, from a
    generator seeded by the run's seed and the task's name (the official draw is unseeded).

    >>> draws("gcd", 3, 0) == draws("gcd", 3, 0) != draws("lcm", 3, 0)
    True
    """
    rng = random.Random(f"{task}/{seed}")
    return [rng.randrange(POOL_SIZE) for _ in range(episodes)]


def left_out(bucket: str, task: str, episode: int, error: Exception) -> dict:
    """The sample row of an episode that could not be built: left out of the win rate, with why."""
    return {"problem_id": f"{task}/{episode}", "bucket": bucket, "task": task, "prompt": None, "response": None,
            "extracted": None, "score": None, "detail": f"not built: {type(error).__name__}: {str(error)[:300]}"}


def build_problems(split: dict, episodes: int, tasks_per_bucket: int | None, seed: int = 0) -> tuple[list[Problem], list[dict]]:
    """`episodes` problems per task (the first `tasks_per_bucket` tasks of each bucket), and a row
    (`left_out`) for every episode this reasoning-gym could not build: the official evaluator leaves
    an episode whose environment raises out of the denominator. With reasoning-gym 0.1.25 every task
    builds, but some hard generators give up on some items ("failed to generate a valid puzzle")."""
    problems, failed = [], []
    for bucket, tasks in split["buckets"].items():
        for task in first(tasks, tasks_per_bucket):
            config = split["hard_configs"][task]
            # The boundary with the installed reasoning-gym: what it cannot build is a logged row, never
            # fatal (ValueError, KeyError, TypeError, AssertionError, ... all occur).
            try:
                dataset = reasoning_gym.create_dataset(task, **config, size=POOL_SIZE, seed=POOL_SEED)
            except Exception as e:  # noqa: BLE001
                failed += [left_out(bucket, task, i, e) for i in range(episodes)]
                continue
            for i, index in enumerate(draws(task, episodes, seed)):
                try:
                    entry = dataset[index]
                except Exception as e:  # noqa: BLE001
                    failed.append(left_out(bucket, task, i, e))
                    continue
                messages = [{"role": "user", "content": PROMPT.format(question=entry["question"])}]
                problems.append(Problem(f"{task}/{i}", messages, Episode(bucket, task, config, index, dataset, entry)))
    return problems, failed


SCORER_ENV = '''
class ScoreEnv:
    """One answer scored by its task's score_answer against the entry the model was shown, in the sandbox:
    reset() returns the score. The entry comes as data: a pool drawn again here can differ (some generators
    iterate over sets, whose order follows the process's hash seed)."""

    def reset(self, seed=None):
        import reasoning_gym
        dataset = reasoning_gym.create_dataset(TASK, **CONFIG, size=POOL_SIZE, seed=POOL_SEED)
        try:
            return "scored", {"score": repr(float(dataset.score_answer(answer=ANSWER, entry=ENTRY)))}
        except Exception as e:
            return "raised", {"error": f"{type(e).__name__}: {str(e)[:200]}"}

    def step(self, action):
        return "", 0.0, True, False, {}
'''


def score_in_sandbox(episode: Episode, answer: str | None) -> tuple[float | None, str]:
    """(score, "") from the task's scorer run in a sandbox of its own; (None, why) if it raised;
    (0.0, why) if the sandbox failed (time, memory, a crash)."""
    entry = repr(episode.entry)
    try:
        plain = ast.literal_eval(entry) == episode.entry
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        plain = False
    if not plain:
        return None, "the entry is not plain data: it cannot be sent to the sandbox"
    code = "\n".join([f"TASK = {episode.task!r}", f"CONFIG = {episode.config!r}", f"POOL_SIZE = {POOL_SIZE!r}",
                      f"POOL_SEED = {POOL_SEED!r}", f"ENTRY = {entry}", f"ANSWER = {answer!r}", SCORER_ENV])
    try:
        with EnvSandbox(code, timeout_s=SANDBOX_TIMEOUT_S, memory_mb=SANDBOX_MEMORY_MB) as sandbox:
            verdict, info = sandbox.reset()
    except SandboxError as e:
        return 0.0, f"sandbox {e.kind}: {e.message[:200]}"
    if verdict != "scored":
        return None, f"score_answer raised {info.get('error')}"
    try:  # the answer ran in there and may have forged the reply: a score that is not a number is a loss
        return float(info["score"]), ""
    except (KeyError, TypeError, ValueError):
        return 0.0, f"sandbox output: no score in {str(info)[:200]}"


def score_here(episode: Episode, answer: str | None) -> tuple[float | None, str]:
    """(score, "") from the task's scorer in this process (it never evaluates the answer); (None, why)
    if it raised."""
    try:  # the boundary with reasoning-gym's scorers: one that raises leaves the episode out
        return float(episode.dataset.score_answer(answer=answer, entry=episode.entry)), ""
    except Exception as e:  # noqa: BLE001
        return None, f"score_answer raised {type(e).__name__}: {str(e)[:200]}"


def score(episode: Episode, response: str):
    """(answer, 1.0 for a win, 0.0 for a loss, None for an episode left out, detail)."""
    answer = extract_answer(response)
    raw, why = (score_in_sandbox if episode.task in SANDBOXED else score_here)(episode, answer)
    if raw is None:
        return answer, None, why + ": left out"
    return answer, float(raw >= WIN), why or f"score {raw:g}"


def bucket_win_rates(rows: list[dict]) -> dict:
    """Each bucket's win rate: its wins over its episodes, those left out (score None) aside.

    >>> bucket_win_rates([{"bucket": "Logic", "score": 1.0}, {"bucket": "Logic", "score": 0.0},
    ...                   {"bucket": "Logic", "score": None}, {"bucket": "Math", "score": 0.0}])
    {'Logic': 0.5, 'Math': 0.0}
    """
    by_bucket = {}
    for row in rows:
        if row["score"] is not None:
            by_bucket.setdefault(row["bucket"], []).append(row["score"])
    return {bucket: sum(wins) / len(wins) for bucket, wins in by_bucket.items()}


def evaluate(engine, tokenizer, options) -> dict:
    split = load_split()
    episodes = options.samples or split["settings"]["episodes_per_task"]
    problems, failed = build_problems(split, episodes, options.limit, options.seed)
    if failed:
        print(f"warning: Reasoning Gym: {len(failed)} episode(s) this reasoning-gym cannot build are left out: "
              + "; ".join(sorted({f"{row['task']}: {row['detail']}" for row in failed})))
    if not problems:
        raise Unavailable("Reasoning Gym hard: reasoning-gym could not build any task of the split")
    params = sampling(settings(split), options)
    rows = sample_and_score(engine, tokenizer, problems, params, 1, options, score)
    for problem, row in zip(problems, rows):
        row.update(bucket=problem.reference.bucket, task=problem.reference.task, item=problem.reference.index)
    rows += failed
    win_rates = bucket_win_rates(rows)
    metrics = {"win_rate": win_rates, "num_tasks": len({row["task"] for row in rows}), "episodes_per_task": episodes,
               "left_out": [row["problem_id"] for row in rows if row["score"] is None], "num_samples": len(rows)}
    return {"columns": {COLUMNS[b]: percent(rate) for b, rate in win_rates.items()}, "metrics": metrics,
            "settings": {"sampling": params.__dict__, "episodes_per_task": episodes, "pool": [POOL_SIZE, POOL_SEED],
                         "draw_seed": options.seed}, "samples": rows}
