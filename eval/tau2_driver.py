"""One tau2-bench domain through tau2's Python API, evaluated as the official run evaluates it.

`eval/external.py` runs this file with the Python of the installed `tau2` command, so it imports only
tau2 and the standard library. Its one argument is JSON: {"tasks": get_tasks' arguments, "run":
run_tasks' arguments}, `save_to` (the results file tau2 writes) among the latter. Added here: the
natural-language-assertion evaluation (`ALL_WITH_NL_ASSERTIONS`, which the `tau2 run` command cannot
ask for), its judge (`TAU2_NL_ASSERTIONS_LLM`, else openrouter/openai/gpt-4o-mini, at T 0) and the
command's default concurrency.
"""

import json
import os
import sys

import tau2.config
import tau2.evaluator.evaluator_nl_assertions as nl_assertions
from tau2.evaluator.evaluator import EvaluationType
from tau2.run import get_tasks, run_tasks

JUDGE = os.environ.get("TAU2_NL_ASSERTIONS_LLM", "openrouter/openai/gpt-4o-mini")


def main(spec: dict) -> None:
    for module in (tau2.config, nl_assertions):  # the evaluator copied the config's names at import
        module.DEFAULT_LLM_NL_ASSERTIONS, module.DEFAULT_LLM_NL_ASSERTIONS_ARGS = JUDGE, {"temperature": 0.0}
    run_tasks(tasks=get_tasks(**spec["tasks"]), **spec["run"], max_concurrency=tau2.config.DEFAULT_MAX_CONCURRENCY,
              evaluation_type=EvaluationType.ALL_WITH_NL_ASSERTIONS)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
