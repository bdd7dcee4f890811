"""The paper's held-out benchmarks (METHOD.md 11), runnable on any checkpoint; `python -m eval.run`.

    eval/run.py                 the runner: model -> engine -> benchmarks -> <out>/*.json(l) + table
    eval/table.py               Table 1 / Table 2 layout; `python -m eval.table RUN_A RUN_B` compares runs
    eval/common.py              options, chat prompts, batched sampling, avg@k, user JSONL reading
    eval/aime.py                AIME 2025 (bundled) / 2026 (user JSONL): avg@32, last \\boxed{}, math-verify
    eval/gpqa.py                GPQA-Diamond (bundled, read at run time): avg@8, shuffled options
    eval/livecodebench.py       LiveCodeBench release_v6 (user JSONL or the Hub) and HumanEval (bundled): pass@1
    eval/code_runner.py         a program against its tests in sandbox/, with LiveCodeBench's runner's verdicts
    eval/reasoning_gym_hard.py  Reasoning Gym hard split (eval/rg_hard_split.json): four bucket win rates
    eval/bfcl.py                BFCL v4 multi-turn: bfcl-eval's data, execution backend and checker
    eval/external.py            tau2-bench and ACEBench-Agent through their own harnesses (user data + endpoints)
    eval/gpu_check.py           one prepared GPU script: seconds per sample of each offline suite

Model-written programs run only inside sandbox/; nothing here executes model text in-process.
"""
