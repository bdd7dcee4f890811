"""Run the paper's held-out benchmarks on a checkpoint and print Table 1 (games) or Table 2 (tool use).

    python -m eval.run --model smollm2-135m --suite games           # offline, CPU: a smoke run
    python -m eval.run --model out/ckpt --suite games --engine vllm --aime2026 aime-2026.jsonl --lcb-data test*.jsonl
    python -m eval.run --model Qwen3-4B --suite tool_use --benchmarks bfcl_multi_turn

Writes `<out>/<benchmark>.json` (columns, metrics, settings, or why it could not run) and
`<out>/<benchmark>.jsonl` (every sample), then prints the table; `python -m eval.table RUN_A RUN_B`
compares runs. Each benchmark samples with its own settings (METHOD.md 11; the columns are the
paper's). Offline: AIME 2025, GPQA-Diamond, HumanEval, Reasoning Gym hard, BFCL v4 multi-turn; user
data: AIME 2026, LiveCodeBench v6, tau2 and ACEBench (eval/external.py).

Without a GPU the defaults are a smoke run (`SMOKE`: one sample of one problem per benchmark, BFCL's
first turn) whose numbers measure nothing; `--full` gives the benchmarks' own settings anywhere.
"""

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import torch
from tqdm import tqdm

from backend import engine
from backend import models
from eval import aime, bfcl, external, gpqa, livecodebench, reasoning_gym_hard, table
from eval.common import Options, Unavailable

BENCHMARKS = {  # name -> (suite, evaluate(engine, tokenizer, options) -> result)
    "aime2025": ("games", aime.evaluate_2025),
    "aime2026": ("games", aime.evaluate_2026),
    "gpqa_diamond": ("games", gpqa.evaluate),
    "livecodebench": ("games", livecodebench.evaluate_lcb),
    "humaneval": ("games", livecodebench.evaluate_humaneval),
    "rg_hard": ("games", reasoning_gym_hard.evaluate),
    "bfcl_multi_turn": ("tool_use", bfcl.evaluate),
    "tau2": ("tool_use", external.evaluate_tau2),
    "acebench_agent": ("tool_use", external.evaluate_acebench),
}
SMOKE = dict(limit=1, samples=1, turns=1, max_new_tokens=256)   # the CPU defaults: a smoke run


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m eval.run", description=__doc__.split("\n")[0],
                                usage="python -m eval.run --model MODEL --suite {games,tool_use} [options: --help]")
    p.add_argument("--model", required=True, help="alias (tiny, smollm2-135m, Qwen3-4B, ...), checkpoint directory or hub id")
    p.add_argument("--suite", required=True, choices=["games", "tool_use"])
    p.add_argument("--benchmarks", nargs="+", choices=sorted(BENCHMARKS), help="a subset of the suite (default: all of it)")
    p.add_argument("--samples", type=int, help="samples per problem (RG: episodes per task; tau2: trials; "
                   f"BFCL: unused, greedy); default: each benchmark's own on GPU, {SMOKE['samples']} on CPU")
    p.add_argument("--limit", type=int,
                   help=f"first N problems per benchmark, 0 = all (default: all on GPU, {SMOKE['limit']} on CPU)")
    p.add_argument("--max-new-tokens", type=int, help=f"0 = each benchmark's own (default: own on GPU, {SMOKE['max_new_tokens']} on CPU)")
    p.add_argument("--turns", type=int, help=f"BFCL: the first N user turns of each entry, 0 = all (default: all on "
                   f"GPU, {SMOKE['turns']} on CPU)")
    p.add_argument("--aime-sampling", choices=["avg32", "offline"], default="avg32",
                   help="AIME: avg32 = 32 samples at T 0.7, top_p 0.8 (the paper's column, default); offline = the "
                   "official offline driver's 64 at T 1.0, top_p 0.95")
    p.add_argument("--full", action="store_true", help="the benchmarks' own settings on CPU too (no smoke run)")
    p.add_argument("--batch-size", type=int, help="prompts per generate call (default: 32 on GPU, 8 on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (on a busy shared box 1 can be 10x faster)")
    p.add_argument("--out", help="run directory (default: out/eval/<model>-<suite>)")
    data = p.add_argument_group("user data and endpoints")
    data.add_argument("--aime2026", help="AIME 2026 JSONL")
    data.add_argument("--lcb-data", nargs="+", help="LiveCodeBench JSONL files (release_v6: test.jsonl ... test6.jsonl; "
                      "default: release_v6 from the Hub through `datasets`)")
    data.add_argument("--date-window", nargs=2, metavar=("START", "END"), help="LiveCodeBench: only problems whose "
                      "contest date is in START..END (YYYY-MM-DD, both included), e.g. a model card's window")
    data.add_argument("--gpqa", help="a GPQA CSV instead of the packaged GPQA-Diamond")
    data.add_argument("--tau2-data-dir", help="tau2-bench's data directory")
    data.add_argument("--acebench-dir", help="a clone of the ACEBench repository")
    data.add_argument("--agent-endpoint", help="OpenAI-compatible URL serving the model under test (tau2, ACEBench)")
    data.add_argument("--agent-model", help="its served model name")
    data.add_argument("--user-endpoint", help="OpenAI-compatible URL of the user simulator (tau2)")
    data.add_argument("--user-model", help="the user simulator's model name")
    args = p.parse_args(argv)
    wrong = [b for b in args.benchmarks or [] if BENCHMARKS[b][0] != args.suite]
    if wrong:
        p.error(f"{wrong} are not in the {args.suite} suite")
    negative = [f"--{k.replace('_', '-')}" for k in ("samples", "limit", "max_new_tokens", "turns", "batch_size", "threads")
                if (getattr(args, k) or 0) < 0]
    if negative or args.samples == 0 or args.batch_size == 0:
        p.error(f"{', '.join(negative) or '--samples and --batch-size'} must be positive (--limit, --turns and "
                f"--max-new-tokens take 0 for the benchmark's own)")
    try:
        [datetime.strptime(day, "%Y-%m-%d") for day in args.date_window or ()]
    except ValueError:
        p.error(f"--date-window takes two dates as YYYY-MM-DD, got {' '.join(args.date_window)}")
    return args


def options_from(args, on_gpu: bool) -> Options:
    """The benchmark options, with the CPU smoke-run defaults filled in (and said out loud)."""
    given = {k: getattr(args, k) for k in SMOKE}
    if not on_gpu and not args.full:
        given = {k: SMOKE[k] if v is None else v for k, v in given.items()}
        print("no GPU: a smoke run (" + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in given.items())
              + "); --full gives the benchmarks' own settings")
    limit, samples, turns, max_new = (given[k] for k in ("limit", "samples", "turns", "max_new_tokens"))
    return Options(samples=samples, limit=limit or None, max_new_tokens=max_new or None, turns=turns or None,
                   batch_size=args.batch_size or (32 if on_gpu else 8), seed=args.seed, aime_sampling=args.aime_sampling,
                   paths={"aime2026": args.aime2026, "lcb": args.lcb_data, "gpqa": args.gpqa,
                          "tau2": args.tau2_data_dir, "acebench": args.acebench_dir},
                   date_window=tuple(args.date_window) if args.date_window else None,
                   endpoints={"agent": args.agent_endpoint, "agent_model": args.agent_model,
                              "user": args.user_endpoint, "user_model": args.user_model})


def run_benchmark(name: str, generator, tokenizer, options: Options) -> tuple[dict, list]:
    """(the result JSON, the samples) of one benchmark; an Unavailable one is a result with its reason."""
    start = time.time()
    options = dataclasses.replace(options, progress=tqdm(total=0, desc=name, unit="completion", disable=None))
    try:
        result = BENCHMARKS[name][1](generator, tokenizer, options)
    except Unavailable as e:
        result = {"columns": {}, "unavailable": str(e), "samples": []}
    finally:
        options.progress.close()
    samples = result.pop("samples")
    return result | {"benchmark": name, "suite": BENCHMARKS[name][0], "num_samples": len(samples),
                     "seconds": round(time.time() - start, 1)}, samples


def write(out: Path, name: str, result: dict, samples: list):
    """The samples, then the result, each written whole and renamed into place (eval.table reads results)."""
    with open(out / f".{name}.jsonl", "w") as f:
        for row in samples:  # default=str: never lose a long run's samples to one odd value
            f.write(json.dumps(row, default=str) + "\n")
    os.replace(out / f".{name}.jsonl", out / f"{name}.jsonl")
    (out / f".{name}.json").write_text(json.dumps(result, indent=1))
    os.replace(out / f".{name}.json", out / f"{name}.json")


def main(argv=None):
    args = parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    options = options_from(args, on_gpu=device.startswith("cuda"))
    names = args.benchmarks or [n for n, (suite, _) in BENCHMARKS.items() if suite == args.suite]
    slug = re.sub(r"[^\w.-]+", "_", Path(args.model).name)
    out = Path(args.out or Path("out") / "eval" / f"{slug}-{args.suite}")
    try:
        model, tokenizer = models.load_model(args.model, device=device)
    except models.ModelLoadError as e:
        raise SystemExit(f"error: {e}") from None
    try:   # before any benchmark runs: a place that cannot take the results is a sentence, not lost samples
        out.mkdir(parents=True, exist_ok=True)
        if not os.access(out, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as e:
        raise SystemExit(f"error: cannot write the results to {out}: {e.strerror or e}") from None
    generator = engine.make_engine(model, tokenizer, kind=args.engine)
    results = {}
    for name in names:
        result, samples = run_benchmark(name, generator, tokenizer, options)
        results[name] = result = result | {"model": args.model}
        write(out, name, result, samples)
        status = ("— (reason below)" if result.get("unavailable")
                  else ", ".join(f"{c} {v:.1f}" for c, v in result["columns"].items()))
        print(f"{name}: {status} ({result['num_samples']} samples, {result['seconds']:.0f} s)", flush=True)
    print(f"\nresults in {out}\n" + table.render([(args.model, table.columns_of(results))], args.suite))
    for line in table.notes([(args.model, results)], args.suite):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
