"""Reasoning Gym, hard split: 100 procedurally generated tasks in four buckets (the Table 1 columns
RG-Math, RG-Algo, RG-Cog, RG-Logic), generated and scored offline by the `reasoning-gym` package.

    python -m eval.run --model Qwen3-4B --suite games --benchmarks rg_hard

The split is `eval/rg_hard_split.json`: the bucket of each task and its hard configuration (the
reasoning_gym paper's Appendix A.3) plus the evaluation settings: 8 episodes per task, T 0.6,
top_p 0.8, top_k 20, 8192 new tokens, win = score >= 1.0. Episode i of a task is item i of
`reasoning_gym.create_dataset(task, **hard_config, seed=0)` (reasoning_gym seeds item i from
seed + i, so the seed is the episode index). The prompt is reasoning_gym's own default system prompt,
which asks for the answer in `<answer>...</answer>`; the answer is the last such span, scored by the
task's `score_answer`. A bucket's win rate is the mean over all its episodes; an episode that this
reasoning-gym cannot build is a loss (`build_problems`). Not here: a second turn (METHOD.md 11).
"""

import json
from pathlib import Path

import reasoning_gym
from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

from backend.engine import SamplingParams
from eval.common import Problem, Unavailable, first, percent, sample_and_score, sampling

SPLIT_PATH = Path(__file__).with_name("rg_hard_split.json")
COLUMNS = {"Math": "RG-Math", "Algorithmic": "RG-Algo", "Cognition": "RG-Cog", "Logic": "RG-Logic"}
DATASET_SEED = 0


def load_split(path=SPLIT_PATH) -> dict:
    split = json.loads(Path(path).read_text())
    tasks = [task for bucket in split["buckets"].values() for task in bucket]
    assert len(tasks) == len(set(tasks)), "a task appears in two buckets of the RG hard split"
    assert set(tasks) == set(split["hard_configs"]), "every RG task needs exactly one hard configuration"
    return split


def settings(split: dict) -> SamplingParams:
    s = split["settings"]
    return SamplingParams(temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"], max_new_tokens=s["max_tokens"])


def unbuilt(bucket: str, task: str, episode: int, error: Exception) -> dict:
    """The sample row of an episode that could not be built: a loss, with the reason."""
    return {"problem_id": f"{task}/{episode}", "bucket": bucket, "task": task, "prompt": None, "response": None,
            "extracted": None, "score": 0.0, "detail": f"not built: {type(error).__name__}: {str(error)[:300]}"}


def build_problems(split: dict, episodes: int, tasks_per_bucket: int | None) -> tuple[list[Problem], list[dict]]:
    """`episodes` problems per task (the first `tasks_per_bucket` tasks of each bucket), and a loss
    row (`unbuilt`) for every episode this reasoning-gym could not build.

    An unbuilt episode is a loss, as the official harness scores an episode that fails, and stays in
    its bucket's denominator (dropping it would give the rest of the task more weight). With
    reasoning-gym 0.1.25 all 100 tasks build, but knight_swap's hard generator gives up on seeds 4
    and 5; a task that does not build at all is a loss on every episode."""
    problems, failed = [], []
    for bucket, tasks in split["buckets"].items():
        for task in first(tasks, tasks_per_bucket):
            # The boundary with the installed reasoning-gym: what it cannot build is a logged loss,
            # never fatal (ValueError, KeyError, TypeError, AssertionError, ... all occur).
            try:
                dataset = reasoning_gym.create_dataset(task, **split["hard_configs"][task], size=episodes, seed=DATASET_SEED)
            except Exception as e:  # noqa: BLE001
                failed += [unbuilt(bucket, task, i, e) for i in range(episodes)]
                continue
            for i in range(episodes):
                try:  # some hard generators give up on a seed ("failed to generate a valid puzzle")
                    entry = dataset[i]
                except Exception as e:  # noqa: BLE001
                    failed.append(unbuilt(bucket, task, i, e))
                    continue
                messages = [{"role": "system", "content": SYSTEM_PROMPTS["default"]},
                            {"role": "user", "content": entry["question"]}]
                problems.append(Problem(f"{task}/{i}", messages, (bucket, task, dataset, entry)))
    return problems, failed


def score(reference, response: str):
    """(answer, 1.0 for a win else 0.0, the raw score) -- a win is a score of at least 1.0."""
    _, _, dataset, entry = reference
    answer = extract_answer(response)
    try:  # task scorers parse arbitrary model text (sympy, regexes, ...): a crash there is a loss
        raw = float(dataset.score_answer(answer=answer, entry=entry))
    except Exception as e:  # noqa: BLE001
        return answer, 0.0, f"score_answer raised {type(e).__name__}: {str(e)[:200]}"
    return answer, float(raw >= 1.0), f"score {raw:g}"


def bucket_win_rates(rows: list[dict]) -> dict:
    """Each bucket's win rate: its wins over all its episode rows, losses that were never built included.

    >>> bucket_win_rates([{"bucket": "Logic", "score": 1.0}, {"bucket": "Logic", "score": 0.0},
    ...                   {"bucket": "Math", "score": 0.0}])
    {'Logic': 0.5, 'Math': 0.0}
    """
    by_bucket = {}
    for row in rows:
        by_bucket.setdefault(row["bucket"], []).append(row["score"])
    return {bucket: sum(wins) / len(wins) for bucket, wins in by_bucket.items()}


def evaluate(engine, tokenizer, options) -> dict:
    split = load_split()
    episodes = options.samples or split["settings"]["episodes_per_task"]
    problems, failed = build_problems(split, episodes, options.limit)
    if failed:
        print(f"warning: Reasoning Gym: {len(failed)} episode(s) this reasoning-gym cannot build count as losses: "
              + "; ".join(sorted({f"{row['task']}: {row['detail']}" for row in failed})))
    if not problems:
        raise Unavailable("Reasoning Gym hard: reasoning-gym could not build any task of the split")
    params = sampling(settings(split), options)
    rows = sample_and_score(engine, tokenizer, problems, params, 1, options, score)
    for problem, row in zip(problems, rows):
        row.update(bucket=problem.reference[0], task=problem.reference[1])
    rows += failed
    win_rates = bucket_win_rates(rows)
    metrics = {"win_rate": win_rates, "num_tasks": len({row["task"] for row in rows}), "episodes_per_task": episodes,
               "unbuilt": [row["problem_id"] for row in failed], "num_samples": len(rows)}
    return {"columns": {COLUMNS[b]: percent(rate) for b, rate in win_rates.items()}, "metrics": metrics,
            "settings": {"sampling": params.__dict__, "episodes_per_task": episodes, "dataset_seed": DATASET_SEED},
            "samples": rows}
