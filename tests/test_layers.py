"""The tree's layout is its import graph: no file imports from a layer above its own (README, The files)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# top to bottom; a module may import its own layer and the layers below it
LAYERS = [{"spade", "toy", "eval", "bench"}, {"harness"},
          {"designer", "agent", "gate", "regret", "grpo", "baselines", "prompts", "envs"},
          {"sandbox", "backend"}, {"compute"}]
LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}


def imported_roots(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def test_every_import_runs_down():
    upward = []
    for path in sorted(ROOT.glob("**/*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0].startswith(".") or relative.parts[0] == "tests":
            continue
        own = LEVEL.get(relative.parts[0].removesuffix(".py"))
        if own is None:
            continue
        upward += [f"{relative} imports {root}" for root in set(imported_roots(path))
                   if LEVEL.get(root, own) < own]
    assert not upward, "imports that run up a layer: " + "; ".join(sorted(upward))
    assert LEVEL["harness"] < LEVEL["grpo"] < LEVEL["backend"] < LEVEL["compute"]
