"""What the engine-trainer probe (harness/sync.py) costs: its time against the step's, in real runs.

    python bench/probe_bench.py                       # the toy run (4 steps) and the embedded demo (3 steps)
    python bench/probe_bench.py --runs toy --steps 16 # the whole toy run

Each run is spade.py as a user starts it (`python -m toy`, `python spade.py`), in a temporary directory,
with fewer steps; its metrics.jsonl holds every step's `time/probe` and `seconds`. Step 0's probe is the
run's first forward, which pays the one-time set-up (the weights' first reads, the kernels' first
calls) that the plays would pay otherwise: the table gives it apart, and for the later steps the
medians and the share of their time the probe took (target: under 2%), and the largest
`sync/logprob_gap` seen. Not here: GPU runs (bench/gpu_check.sh prints a GPU run's gap).
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name -> (what it runs, the command line after `python`); {out} is the run's directory
RUNS = {
    "toy": ("the toy run (`python -m toy`)", ["-m", "toy", "--out", "{out}/toy/run"]),
    "demo": ("the embedded demo (`python spade.py`)", ["spade.py", "--out", "{out}/demo"]),
    "tiny": ("a tiny run (tests)", ["spade.py", "--model", "tiny", "--pool", "envs", "--num-envs", "2",
                                    "--plays-per-env", "2", "--max-new-tokens", "8", "--max-turns", "1",
                                    "--out", "{out}/tiny"]),
}
STEPS = {"toy": 4, "demo": 3, "tiny": 1}


def measure(name, steps, folder):
    """One run of `name` for `steps` steps: its row of the table (a dict), or None where it failed."""
    command = [sys.executable, *(a.format(out=folder) for a in RUNS[name][1]), "--steps", str(steps)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    found = sorted(Path(folder).glob(f"{name}/**/metrics.jsonl"))   # the toy's is in toy/run/
    if result.returncode != 0 or not found:
        print(f"{name}: failed ({result.returncode}): {(result.stderr or result.stdout)[-600:]}", flush=True)
        return None
    metrics = [json.loads(line) for line in found[0].read_text().splitlines()]
    later = metrics[1:] or metrics   # a one-step run (the tests'): its only step
    probe, seconds = [m["time/probe"] for m in later], [m["seconds"] for m in later]
    return dict(run=RUNS[name][0], steps=len(metrics), first=metrics[0]["time/probe"], step=statistics.median(seconds),
                probe=statistics.median(probe), share=sum(probe) / sum(seconds),
                gap=max(m["sync/logprob_gap"] for m in metrics))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="toy,demo", help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--steps", type=int, default=0, help="steps of each run (0: toy 4, demo 3, tiny 1)")
    args = parser.parse_args(argv)
    rows = {}
    print("| run | steps | probe at step 0 | later steps: step, median | probe, median | probe / step time | "
          "largest sync/logprob_gap |")
    print("|---|---|---|---|---|---|---|")
    for name in args.runs.split(","):
        with tempfile.TemporaryDirectory(prefix="probe-bench-") as folder:
            row = measure(name, args.steps or STEPS[name], folder)
        if row:
            rows[name] = row
            print(f"| {row['run']} | {row['steps']} | {row['first']:.2f} s | {row['step']:.2f} s | "
                  f"{row['probe'] * 1000:.1f} ms | {100 * row['share']:.2f}% | {row['gap']:.2g} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
