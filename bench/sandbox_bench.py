"""How fast is the sandbox? Start to first observation, the step round trip and validate_env, side by
side with (a) a fresh `python -c` interpreter per environment running the same operations on a pipe,
and (b) the same operations in this process (the official approach, which isolates nothing). Ratios
are against (a), measured in the same run.

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
from sandbox import contract  # noqa: E402
from sandbox import forkserver  # noqa: E402
import gate  # noqa: E402
import sandbox  # noqa: E402

# (a) a fresh interpreter per environment: the fork server's operations, one JSON request per line.
FRESH_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from sandbox import forkserver
operations = forkserver.operations()
for line in sys.stdin:
    print(json.dumps(operations[(request := json.loads(line))["op"]](request)), flush=True)
"""


class InProcess:
    """(b): the operations called directly; `call` has the signature of EnvSandbox's. Loading code puts
    the environment's modules into sys.modules, as it does in a child; close() puts ours back."""

    def __init__(self):
        self.operations = forkserver.operations()
        self.modules = {name: sys.modules.get(name) for name in (*contract.BASE_CLASS_MODULES, "environment")}

    def call(self, op, deadline=None, **request):
        return self.operations[op](request)

    def close(self):
        for name, module in self.modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class FreshInterpreter:
    """(a): a new interpreter per environment, spoken to over a pipe."""

    def __init__(self):
        self.child = subprocess.Popen([sys.executable, "-c", FRESH_CHILD, str(ROOT)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)

    def call(self, op, deadline=None, **request):
        self.child.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.child.stdin.flush()
        return json.loads(self.child.stdout.readline())

    def close(self):
        self.child.kill()
        self.child.wait()


class Sandboxed:
    """Ours: EnvSandbox with no code, then the same requests (load, reset, step) through its `request`."""

    def __init__(self):
        self.box = sandbox.EnvSandbox(None)

    def call(self, op, deadline=None, **request):
        return self.box.request(op, deadline=deadline, **request)

    def close(self):
        self.box.close()


METHODS = {"spade sandbox (fork server)": Sandboxed, "(a) fresh python -c": FreshInterpreter,
           "(b) in-process exec": InProcess}


def play(method, code, steps, action):
    """(seconds to the first observation, [seconds per step])."""
    start = time.perf_counter()
    runner = method()
    runner.call("load", code=code, max_turns=contract.PLAY_MAX_TURNS)
    runner.call("reset", seed=0)
    first = time.perf_counter() - start
    step_times = []
    for _ in range(steps):
        tick = time.perf_counter()
        runner.call("step", action=action)
        step_times.append(time.perf_counter() - tick)
    getattr(runner, "close", lambda: None)()
    return first, step_times


def validate(method, code):
    """Seconds for the whole gate (gate.checks) through this method's calls."""
    start, runners = time.perf_counter(), []

    def sandbox():   # the gate's two processes, as this method makes them: the first gone before the second
        if runners:
            runners[-1].close()
        runners.append(method())
        return runners[-1].call
    gate.checks(sandbox, code, contract.PLAY_MAX_TURNS)
    runners[-1].close()
    return time.perf_counter() - start


def quantiles(values):
    ordered = sorted(values)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=200, help="environments started per method")
    parser.add_argument("--steps", type=int, default=20, help="steps per environment")
    parser.add_argument("--example", default=str(ROOT / "tests" / "fixtures" / "examples" / "vault_dial.py"))
    args = parser.parse_args(argv)
    example = pathlib.Path(args.example)
    code, action = example.read_text(), "\\boxed{probe A 5}"
    isolation = sandbox.isolation()  # starts the fork server outside the timings (once per trainer process)
    rows = {}
    for name, method in METHODS.items():
        firsts, steps = [], []
        for _ in range(args.envs):
            first, step_times = play(method, code, args.steps, action)
            firsts.append(first)
            steps += step_times
        validations = [validate(method, code) for _ in range(max(10, args.envs // 4))]
        rows[name] = (quantiles(firsts), quantiles(steps), quantiles(validations))
    base = rows["(a) fresh python -c"]
    print(f"sandbox benchmark: {args.envs} environments x {args.steps} steps ({example.name}), {os.cpu_count()} CPUs")
    print("isolation: " + "; ".join(f"{layer}: {line}" for layer, line in isolation.items()))
    print(f"{'method':<30}{'start->obs med/p99 ms':>24}{'vs (a)':>8}{'step med/p99 ms':>20}{'vs (a)':>8}"
          f"{'validate med/p99 ms':>22}{'vs (a)':>8}")
    for name, row in rows.items():
        cells = "".join(f"{f'{med:.2f} / {p99:.2f}':>{w}}{base[i][0] / med:>7.1f}x"
                        for i, ((med, p99), w) in enumerate(zip(row, (24, 20, 22))))
        print(f"{name:<30}{cells}")
    print("(vs (a) = how many times faster than a fresh interpreter per environment; higher is better)")
    return rows


if __name__ == "__main__":
    main()
