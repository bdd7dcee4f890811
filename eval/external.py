"""tau2-bench (retail, airline, telecom) and ACEBench-Agent (multi-step, multi-turn): benchmarks whose
data and harnesses are not on PyPI and which need a second LLM playing the user. We run the
official harnesses as subprocesses against the model under test served at an OpenAI-compatible URL.

    vllm serve CHECKPOINT --served-model-name policy --port 8000 \\
        --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3 &   # the model under test
    python -m eval.run --model CHECKPOINT --suite tool_use --benchmarks tau2 acebench_agent \\
        --agent-endpoint http://localhost:8000/v1 --agent-model policy \\
        --user-endpoint https://api.openai.com/v1 --user-model gpt-4.1 \\
        --tau2-data-dir tau2-bench/data --acebench-dir ACEBench

vLLM answers a request that carries tools only when it is served with `--enable-auto-tool-choice` and
a `--tool-call-parser` (`hermes` for Qwen3's `<tool_call>` JSON); `--reasoning-parser qwen3` keeps a
thinking model's reasoning out of the answer the harness parses. What each harness needs is checked
before anything runs (`tau2_checks`, `acebench_checks`): a missing piece is one sentence, not a crash.
What each is given is in `evaluate_tau2` and `evaluate_acebench`.

Not here: starting `vllm serve`, patching third-party clones, tests against the real harnesses.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from eval.common import Unavailable, percent

TAU2_DOMAINS = {"retail": "tau2 Retail", "airline": "tau2 Airline", "telecom": "tau2 Telecom"}
TAU2_TRIALS, TAU2_MAX_STEPS = 4, 200
TAU2_AGENT_ARGS = {"temperature": 0.0, "top_p": 0.8, "top_k": 20, "max_tokens": 16384}
TAU2_USER_ARGS = {"temperature": 0.0, "max_tokens": 2048}  # the official user simulator's cap
TAU2_DRIVER = Path(__file__).with_name("tau2_driver.py")
ACE_PATCHED = "ACEBENCH_AGENT_BASE_URL"  # what a clone patched to route unknown model names reads
ACE_CATEGORIES = {"agent_multi_step": "ACE MultiStep", "agent_multi_turn": "ACE MultiTurn"}


def endpoint_problem(url: str | None, what: str, timeout_s: float = 5.0) -> str | None:
    """None if `url` answers `GET {url}/models` like an OpenAI-compatible server, else why not."""
    if not url:
        return f"no {what} endpoint was given"
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=timeout_s) as reply:
            json.load(reply)
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):  # it answers; the key is the harness's business
            return None
        return f"the {what} endpoint {url} answered HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"the {what} endpoint {url} does not answer ({getattr(e, 'reason', e)})"
    return None


def missing(checks: list[tuple[bool, str]]) -> str | None:
    """The failed checks as one sentence.

    >>> missing([(True, "x"), (False, "the tau2 command is not installed"), (False, "no data dir")])
    'the tau2 command is not installed; no data dir'
    >>> missing([(True, "x")]) is None
    True
    """
    problems = [message for ok, message in checks if not ok]
    return "; ".join(problems) if problems else None


def tau2_python() -> list[str] | None:
    """The interpreter of the installed `tau2` command, where tau2 and its dependencies are importable:
    the one its `#!` line names or, where that line is `#!/bin/sh` (pip's launcher for an interpreter
    path that is long or has spaces), the one its second line execs. None without either."""
    script = shutil.which("tau2")
    try:
        with open(script or "", "rb") as f:
            first, second = (f.read(4096).decode(errors="replace").splitlines() + ["", ""])[:2]
    except OSError:
        return None
    if first.startswith("#!") and "python" in first:
        return shlex.split(first[2:])
    try:   # pip writes: '''exec' "/path/to/python" "$0" "$@"
        words = shlex.split(second) if first.strip() == "#!/bin/sh" else []
    except ValueError:
        return None
    return words[1:2] if words[:1] == ["exec"] and len(words) > 1 and "python" in words[1] else None


def tau2_checks(options) -> list[tuple[bool, str]]:
    data = options.paths.get("tau2")
    domains = Path(data or ".") / "tau2" / "domains"
    agent = endpoint_problem(options.endpoints.get("agent"), "agent")
    user = endpoint_problem(options.endpoints.get("user"), "user-simulator")
    return [(tau2_python() is not None,
             "no `tau2` command whose `#!` line names its Python (pip install the tau2-bench repository)"),
            (bool(data), "no --tau2-data-dir was given"),
            (not data or all((domains / d).is_dir() for d in TAU2_DOMAINS), f"{domains} lacks a domain of {sorted(TAU2_DOMAINS)}"),
            (bool(options.endpoints.get("agent_model")), "no --agent-model (the served name of the model under test)"),
            (bool(options.endpoints.get("user_model")), "no --user-model for the user simulator"),
            (agent is None, agent or ""), (user is None, user or "")]


def pass_at_1(simulations: list[dict], expected: int = 0) -> float:
    """tau2's pass@1 as the authors score it: simulations whose reward is within 1e-6 of 1, over the
    simulations that should have run (`expected` = tasks x trials), so those the harness never returned
    count as failures; 0.0 when none ran.

    >>> pass_at_1([{"reward_info": {"reward": 1.0}}, {"reward_info": {"reward": 0.0}}, {"reward_info": None}])
    0.3333333333333333
    >>> pass_at_1([{"reward_info": {"reward": 1.0}}, {"reward_info": {"reward": 1.0}}], expected=8), pass_at_1([])
    (0.25, 0.0)
    """
    passed = sum(abs((s.get("reward_info") or {}).get("reward", 0.0) - 1.0) <= 1e-6 for s in simulations)
    total = max(len(simulations), expected)
    return passed / total if total else 0.0


def run_harness(command: list[str], cwd, env: dict, what: str):
    result = subprocess.run(command, cwd=cwd, env=os.environ | env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {result.returncode}): {result.stderr[-2000:]}")


def evaluate_tau2(engine, tokenizer, options) -> dict:
    """tau2-bench through tau2's Python API (`pip install` of the tau2-bench repository): per domain,
    `tau2_driver.py`, run by the Python of the installed `tau2` command, calls `run_tasks` with the data
    directory (the repository's `data/`, holding `tau2/domains/<domain>/`, as `TAU2_DATA_DIR`), the
    agent endpoint and the user simulator's endpoint and model (paper: gpt-4.1 at T 0; API keys come
    from the environment, as the harness reads them). The results land in
    `<data>/simulations/spade_<domain>_<id>/results.json`.

    Settings (METHOD.md 11): base split, 4 trials (`--samples`), agent T 0 / top_p 0.8 / top_k 20 /
    16384 tokens, user simulator T 0 / 2048 tokens, at most 200 steps, the first `--limit` tasks;
    pass@1 = passed simulations / (tasks x trials), a pass being a reward within 1e-6 of 1. Not
    forwarded: `--seed`, `--batch-size`, `--max-new-tokens`.

    Rewards come from the natural-language-assertion evaluation, as in the official run
    (`EvaluationType.ALL_WITH_NL_ASSERTIONS`, judged by `openrouter/openai/gpt-4o-mini` at T 0, or by
    `TAU2_NL_ASSERTIONS_LLM`). The official's LLM arguments also ask for no retries and a 600 s timeout
    per call; ours leave tau2's own.
    """
    problem = missing(tau2_checks(options))
    if problem:
        raise Unavailable(f"tau2-bench cannot run: {problem}")
    data, ep = Path(options.paths["tau2"]), options.endpoints
    trials, columns, metrics = options.samples or TAU2_TRIALS, {}, {}
    for domain, column in TAU2_DOMAINS.items():
        save_to = data / "simulations" / f"spade_{domain}_{uuid.uuid4().hex[:8]}" / "results.json"
        tasks = {"task_set_name": domain, "task_split_name": "base", "num_tasks": options.limit or None}
        run = {"domain": domain, "agent": "llm_agent", "user": "user_simulator", "num_trials": trials,
               "max_steps": TAU2_MAX_STEPS, "save_to": str(save_to),
               "llm_agent": f"openai/{ep['agent_model']}",
               "llm_args_agent": TAU2_AGENT_ARGS | {"api_base": ep["agent"]},
               "llm_user": f"openai/{ep['user_model']}", "llm_args_user": TAU2_USER_ARGS | {"api_base": ep["user"]}}
        run_harness(tau2_python() + [str(TAU2_DRIVER), json.dumps({"tasks": tasks, "run": run})], cwd=None,
                    env={"TAU2_DATA_DIR": str(data), "PYTHONSAFEPATH": "1"},  # eval/'s modules stay out of sys.path
                    what=f"tau2-bench's {domain} run")
        results = json.loads(save_to.read_text())   # tau2's Results
        metrics[domain] = pass_at_1(results["simulations"], len(results.get("tasks", [])) * trials)
        columns[column] = percent(metrics[domain])
    columns["tau2 Avg"] = percent(sum(metrics.values()) / len(metrics))
    return {"columns": columns, "metrics": {"pass_at_1": metrics},
            "settings": {"trials": trials, "max_steps": TAU2_MAX_STEPS, "agent": TAU2_AGENT_ARGS}, "samples": []}


def acebench_checks(options) -> list[tuple[bool, str]]:
    root = options.paths.get("acebench")
    data = Path(root or ".") / "data_all" / "data_en"
    agent = endpoint_problem(options.endpoints.get("agent"), "agent")
    return [(bool(root), "no --acebench-dir was given (a clone of the ACEBench repository)"),
            (not root or all((data / f"data_{c}.json").is_file() for c in ACE_CATEGORIES), f"{data} lacks the agent data files"),
            (not root or (Path(root) / "generate.py").is_file(), f"{root} has no generate.py"),
            (not root or ACE_PATCHED in read_text(Path(root) / "model_inference" / "apimodel_inference.py"),
             f"{root} is not patched to route an unknown model name to ACEBENCH_AGENT_BASE_URL (see evaluate_acebench)"),
            (bool(options.endpoints.get("agent_model")), "no --agent-model (the served name of the model under test)"),
            (bool(options.endpoints.get("user_model")), "no --user-model for the user simulator"),
            (agent is None, agent or "")]


def read_text(path: Path) -> str:
    """A file's text, or "" where it cannot be read (a check then says what is missing)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def evaluate_acebench(engine, tokenizer, options) -> dict:
    """ACEBench's Agent group through a clone of its repository (data under `data_all/data_en/`,
    `generate.py`, `eval_main.py`); the user model (paper: gpt-4o) is reached through the harness's
    own API settings (`OPENAI_API_KEY` is passed on as the `GPT_API_KEY` and `GPT_AGENT_API_KEY` it
    reads). Settings as the official run: T 0.7, top_p 1.0, 16384 tokens, at most 40 dialog turns; the
    score is the harness's `end_to_end_accuracy`, and the column the mean of MultiStep and MultiTurn
    (Table 2).

    Stock ACEBench refuses a served name such as `policy` (its inference map lists known models only)
    and routes only its own API models. The clone must carry the SPADE authors' patches
    (`eval_offline/suites/_acebench_patches.py` of the official repository): an unknown model name
    maps to `APIModelInference`, which, like the Agent clients, reads `ACEBENCH_AGENT_BASE_URL`,
    `ACEBENCH_AGENT_API_KEY` and the served name `ACEBENCH_SERVED_MODEL` (all three set here); and the
    served model's reply is cut after its last `</think>` before ACEBench parses it (thinking on, as
    officially, with the server's `--reasoning-parser qwen3`). `acebench_checks` refuses a clone
    without the routing patch. An unknown flag makes the harness exit non-zero, a RuntimeError with
    its stderr. Not forwarded: `--seed`, `--batch-size`, `--max-new-tokens`, `--limit`, `--samples`,
    `--user-endpoint`.
    """
    problem = missing(acebench_checks(options))
    if problem:
        raise Unavailable(f"ACEBench-Agent cannot run: {problem}")
    root, ep = Path(options.paths["acebench"]), options.endpoints
    model, env = ep["agent_model"], {"ACEBENCH_AGENT_BASE_URL": ep["agent"], "ACEBENCH_AGENT_API_KEY": "EMPTY",
                                     "ACEBENCH_SERVED_MODEL": ep["agent_model"]}
    if os.environ.get("OPENAI_API_KEY"):  # the gpt-4o user simulator's key, under the names ACEBench reads
        env = {"GPT_API_KEY": os.environ["OPENAI_API_KEY"], "GPT_AGENT_API_KEY": os.environ["OPENAI_API_KEY"]} | env
    run_harness([sys.executable, "generate.py", "--model", model, "--category", "agent", "--language", "en",
                 "--temperature", "0.7", "--top-p", "1.0", "--max-tokens", "16384", "--max-dialog-turns", "40",
                 "--user-model", ep["user_model"]], cwd=root, env=env, what="ACEBench generate.py")
    run_harness([sys.executable, "eval_main.py", "--model", model, "--category", "agent", "--language", "en"],
                cwd=root, env=env, what="ACEBench eval_main.py")
    scores, columns = {}, {}
    for category, column in ACE_CATEGORIES.items():
        path = root / "score_all" / "score_en" / model / f"data_{category}_score.json"
        accuracy = json.loads(path.read_text().splitlines()[0])["end_to_end_accuracy"]
        scores[category] = accuracy / 100 if accuracy > 1 else accuracy  # versions differ: percent or fraction
        columns[column] = percent(scores[category])
    columns["ACE Avg"] = percent(sum(scores.values()) / len(scores))
    return {"columns": columns, "metrics": {"end_to_end_accuracy": scores}, "settings": {"temperature": 0.7}, "samples": []}
