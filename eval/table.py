"""Benchmark results as the paper's tables: Table 1 (games) and Table 2 (tool use).

    python -m eval.table out/eval/base-games out/eval/spade-games     # base vs trained, with a delta

Each argument is a run directory written by `python -m eval.run` (one `<benchmark>.json` per
benchmark); its row is named after the model it evaluated, as eval.run printed it. Cells are percents with one decimal; "—" marks a benchmark that could not run, and
the reason is printed once under the table. Avg is the mean of the columns the paper averages
(Table 1: the eight benchmark columns; Table 2: the three group averages), over those that ran; a
`*` marks an average over fewer columns than the paper's. Delta compares each run with the first,
over the columns both have. Columns outside the paper's layout (HumanEval) are listed after it.
"""

import json
import sys
from pathlib import Path

GAMES = ["AIME'25", "AIME'26", "GPQA-D", "LCB-v6", "RG-Math", "RG-Algo", "RG-Cog", "RG-Logic"]
TOOL_USE = ["BFCL Base", "BFCL MissFunc", "BFCL MissParam", "BFCL LongCtx", "BFCL Avg",
            "tau2 Retail", "tau2 Airline", "tau2 Telecom", "tau2 Avg", "ACE MultiStep", "ACE MultiTurn", "ACE Avg"]
LAYOUT = {"games": (GAMES, GAMES), "tool_use": (TOOL_USE, ["BFCL Avg", "tau2 Avg", "ACE Avg"])}  # (shown, averaged)


def load_run(directory) -> dict:
    """{benchmark: result} from the `<benchmark>.json` files of a run directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SystemExit(f"error: {directory} is not a run directory (python -m eval.run --out writes one)")
    results = {}
    for path in sorted(directory.glob("*.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):   # unreadable, not UTF-8 or JSON, nested past the parser
            result = None
        if _is_result(result):
            results[result["benchmark"]] = result
        else:
            print(f"warning: {path} is not a benchmark result; left out")
    if not results:
        raise SystemExit(f"error: {directory} holds no benchmark results (<benchmark>.json)")
    return results


def _is_result(result) -> bool:
    """What eval.run writes: a benchmark and suite name, columns of percents (0 to 100), the model and any reason
    as text."""
    columns = result.get("columns") if isinstance(result, dict) else None
    return (isinstance(result, dict) and isinstance(result.get("benchmark"), str) and isinstance(result.get("suite"), str)
            and isinstance(columns, dict) and all(type(v) in (int, float) and 0 <= v <= 100 for v in columns.values())
            and all(isinstance(result.get(k, ""), str) for k in ("model", "unavailable")))


def columns_of(results: dict) -> dict:
    return {column: value for result in results.values() for column, value in (result.get("columns") or {}).items()}


def average(columns: dict, averaged: list[str]) -> tuple[float | None, int]:
    """(mean of the `averaged` columns present, how many there were).

    >>> average({"A": 10.0, "B": 20.0, "X": 99.0}, ["A", "B", "C"])
    (15.0, 2)
    >>> average({}, ["A"])
    (None, 0)
    """
    values = [columns[c] for c in averaged if c in columns]
    return (round(sum(values) / len(values), 1) if values else None), len(values)


def cell(value) -> str:
    return "—" if value is None else f"{value:.1f}"   # the official tables' mark for a missing metric


def render(runs: list[tuple[str, dict]], suite: str) -> str:
    """A text table: one row per (label, {column: percent}); Delta vs the first row when there are two or more.

    >>> print(render([("base", {"A": 10.0}), ("trained", {"A": 12.5})], "toy"))
    Model   |    A |  Avg |    Δ
    --------+------+------+-----
    base    | 10.0 | 10.0 |    –
    trained | 12.5 | 12.5 | +2.5
    """
    shown, averaged = LAYOUT.get(suite, (sorted({c for _, cols in runs for c in cols}),) * 2)
    header = ["Model", *shown, "Avg"] + (["Δ"] if len(runs) > 1 else [])
    lines = []
    for label, columns in runs:
        avg, used = average(columns, averaged)
        row = [label, *(cell(columns.get(c)) for c in shown), cell(avg) + ("*" if avg is not None and used < len(averaged) else "")]
        if len(runs) > 1:
            row.append(delta(runs[0][1], columns, averaged) if columns is not runs[0][1] else "–")
        lines.append(row)
    widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]

    def fmt(row):
        return " | ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths)))

    footnote = [f"* Avg over the columns that ran, fewer than the paper's {len(averaged)}"] if any(
        row[len(shown) + 1].endswith("*") for row in lines) else []
    return "\n".join([fmt(header), "-+-".join("-" * w for w in widths), *map(fmt, lines), *footnote])


def delta(base: dict, other: dict, averaged: list[str]) -> str:
    """Avg of `other` minus Avg of `base`, over the averaged columns both have.

    >>> delta({"A": 10.0, "B": 30.0}, {"A": 12.0}, ["A", "B"])
    '+2.0'
    """
    common = [c for c in averaged if c in base and c in other]
    if not common:
        return "—"
    return f"{average(other, common)[0] - average(base, common)[0]:+.1f}"


def notes(runs: list[tuple[str, dict]], suite: str) -> list[str]:
    """Why benchmarks show — (each reason once), and the columns outside the paper's layout."""
    shown = LAYOUT.get(suite, ([],))[0]
    lines, seen = [], set()
    for label, results in runs:
        for name, result in results.items():
            if result.get("unavailable") and result["unavailable"] not in seen:
                seen.add(result["unavailable"])
                lines.append(f"— {name}: {result['unavailable']}")
        extra = {c: v for c, v in columns_of(results).items() if c not in shown}
        if extra and shown:
            lines.append(f"also ran ({label}): " + ", ".join(f"{c} {cell(v)}" for c, v in extra.items()))
    return lines


def model_of(directory, results: dict) -> str:
    """The model a run directory's results name (eval.run writes it into each), else the folder's name."""
    models = {result.get("model") for result in results.values()}
    model = models.pop() if len(models) == 1 else None
    return model if isinstance(model, str) else Path(directory).name


def main(argv=None):
    directories = sys.argv[1:] if argv is None else argv
    if not directories:
        raise SystemExit("usage: python -m eval.table RUN_DIR [RUN_DIR ...]")
    runs = [(d, load_run(d)) for d in directories]
    labels = [model_of(d, results) for d, results in runs]
    runs = [(label if labels.count(label) == 1 else f"{label} ({Path(d).name})", results)   # one model twice
            for label, (d, results) in zip(labels, runs)]
    suites = {result["suite"] for _, results in runs for result in results.values()}
    if len(suites) != 1:
        raise SystemExit(f"error: these runs mix suites {sorted(suites)}; compare runs of one suite")
    suite = suites.pop()
    print(render([(label, columns_of(results)) for label, results in runs], suite))
    for line in notes(runs, suite):
        print(line)


if __name__ == "__main__":
    main()
