"""How fast is the sandbox? Start-to-first-observation, step round trip and validate_env, side by
side with (a) a fresh `python -c` interpreter per environment and (b) in-process `exec` (the
official approach, which isolates nothing). Ratios are against (a), measured in the same run.

    python bench/sandbox_bench.py [--envs 200] [--steps 20]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import sandbox  # noqa: E402

# (a) a fresh interpreter per environment: the same exec/construct/reset, then steps over a pipe.
FRESH_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import sandbox
env = sandbox.construct(sandbox.load_env_class(json.loads(sys.stdin.readline())), 25)
print(json.dumps(sandbox.play_reset(env, 0)), flush=True)
for line in sys.stdin:
    print(json.dumps(sandbox.play_step(env, json.loads(line))), flush=True)
"""
FRESH_VALIDATE = "import sys; sys.path.insert(0, sys.argv[1]); import sandbox; sandbox.gate(sys.stdin.read())"


def fresh_interpreter(code, steps, action):
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", FRESH_CHILD, str(ROOT)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    child.stdin.write(json.dumps(code) + "\n")
    child.stdin.flush()
    child.stdout.readline()
    first = time.perf_counter() - start
    step_times = []
    for _ in range(steps):
        t = time.perf_counter()
        child.stdin.write(json.dumps(action) + "\n")
        child.stdin.flush()
        child.stdout.readline()
        step_times.append(time.perf_counter() - t)
    child.kill()
    child.wait()
    return first, step_times


def our_sandbox(code, steps, action):
    start = time.perf_counter()
    with sandbox.EnvSandbox(code) as box:
        box.reset(seed=0)
        first = time.perf_counter() - start
        step_times = []
        for _ in range(steps):
            t = time.perf_counter()
            box.step(action)
            step_times.append(time.perf_counter() - t)
    return first, step_times


def in_process(code, steps, action):
    start = time.perf_counter()
    env = sandbox.construct(sandbox.load_env_class(code), 25)
    sandbox.play_reset(env, 0)
    first = time.perf_counter() - start
    step_times = []
    for _ in range(steps):
        t = time.perf_counter()
        sandbox.play_step(env, action)
        step_times.append(time.perf_counter() - t)
    return first, step_times


def timed(fn, *args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


VALIDATORS = {
    "spade sandbox (fork server)": lambda code: sandbox.validate_env(code),
    "(a) fresh python -c": lambda code: subprocess.run([sys.executable, "-c", FRESH_VALIDATE, str(ROOT)],
                                                       input=code, text=True, check=True),
    "(b) in-process exec": lambda code: sandbox.gate(code),
}
PLAYERS = {"spade sandbox (fork server)": our_sandbox, "(a) fresh python -c": fresh_interpreter,
           "(b) in-process exec": in_process}


def quantiles(values):
    ordered = sorted(values)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=200, help="environments started per method")
    parser.add_argument("--steps", type=int, default=20, help="steps per environment")
    parser.add_argument("--example", default=str(ROOT / "tests" / "fixtures" / "examples" / "vault_dial.py"))
    args = parser.parse_args()
    code, action = pathlib.Path(args.example).read_text(), "\\boxed{probe A 5}"
    sandbox.isolation()  # start the fork server outside the timings (once per trainer process)
    rows = {}
    for name, play in PLAYERS.items():
        firsts, steps = [], []
        for _ in range(args.envs):
            first, step_times = play(code, args.steps, action)
            firsts.append(first)
            steps += step_times
        validations = [timed(VALIDATORS[name], code) for _ in range(max(10, args.envs // 4))]
        rows[name] = (quantiles(firsts), quantiles(steps), quantiles(validations))
    base = rows["(a) fresh python -c"]
    print(f"sandbox benchmark: {args.envs} environments x {args.steps} steps ({example.name}), "
          f"{os.cpu_count()} CPUs, isolation: {sandbox.isolation()}")
    print(f"{'method':<30}{'start->obs med/p99 ms':>24}{'vs (a)':>8}{'step med/p99 ms':>20}{'vs (a)':>8}"
          f"{'validate med/p99 ms':>22}{'vs (a)':>8}")
    for name, row in rows.items():
        cells = "".join(f"{f'{med:.2f} / {p99:.2f}':>{w}}{base[i][0] / med:>7.1f}x"
                        for i, ((med, p99), w) in enumerate(zip(row, (24, 20, 22))))
        print(f"{name:<30}{cells}")
    print("(vs (a) = how many times faster than a fresh interpreter per environment; higher is better)")


if __name__ == "__main__":
    main()
