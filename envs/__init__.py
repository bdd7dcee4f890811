"""Seed environments and the environment-pool loader.

The skill tables are METHOD.md section 2.2's: six cognitive skills for games (the six the paper's runs
use, in that order) and six tool-use skills, each with the one-line description the designer prompt
renders as "<name> (<description>)". The files beside this one are environments written by us, one
class each, named `<short_name>_<skill_slug>.py` so the skill can be read off the file name exactly as
in the authors' released pools (`game_<rollout:05d>_<index:03d>_<skill_slug>.py`).

`load_pool` reads a directory of such files or a JSONL file with a `code` field per line, validates
each through `sandbox.validate_env` and returns the ones that pass; `load_pool("envs")` prints
"pool: 18/18 environments valid (0 skipped lines)".

    >>> skill_slug("Multi-Step Workflows")
    'multi_step_workflows'
    >>> skill_from_name("game_00012_005_pattern_recognition")
    'Pattern Recognition'

It does not deduplicate, sample or balance skills: that is the designer's business.
"""
import json
import re
from dataclasses import dataclass
from pathlib import Path

GAME_SKILLS = {
    "Mathematical Reasoning": "solve math problems/equations",
    "Logical Deduction": "derive conclusions from premises and rules",
    "Spatial Reasoning": "spatial relations, mental rotation",
    "Pattern Recognition": "find patterns in sequences/numbers/text",
    "Optimization": "best solution under constraints",
    "Causal Inference": "cause and effect",
}
TOOL_SKILLS = {
    "API Orchestration": "chain state-mutating calls",
    "Data Retrieval": "query then act",
    "State Modification": "dependent mutation chains",
    "Error Recovery": "handle failures, verify, retry",
    "Tool Selection": "choose among alternatives by state",
    "Multi-Step Workflows": "ordered dependent sequences",
}
UNKNOWN_SKILL = "unknown"


def skill_slug(name: str) -> str:
    """File-name form of a skill: "API Orchestration" -> "api_orchestration"."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


_SKILL_BY_SLUG = {skill_slug(name): name for name in {**GAME_SKILLS, **TOOL_SKILLS}}


def skill_from_name(stem: str) -> str:
    """The skill whose slug ends `stem`, longest slug first; UNKNOWN_SKILL if none does.

    >>> skill_from_name("toll_roads_optimization"), skill_from_name("notes")
    ('Optimization', 'unknown')
    """
    matches = [slug for slug in _SKILL_BY_SLUG if stem == slug or stem.endswith("_" + slug)]
    return _SKILL_BY_SLUG[max(matches, key=len)] if matches else UNKNOWN_SKILL


@dataclass
class Environment:
    env_id: str   # file stem, or the JSONL record's game_file / env_id
    skill: str    # a key of GAME_SKILLS or TOOL_SKILLS, or UNKNOWN_SKILL
    code: str     # the environment's Python source (after extraction and repair once validated)


def _read_directory(path: Path) -> list[Environment]:
    files = sorted(p for p in path.glob("*.py") if p.name != "__init__.py")
    return [Environment(p.stem, skill_from_name(p.stem), p.read_text()) for p in files]


def _read_jsonl(path: Path) -> tuple[list[Environment], int]:
    """Environments of a JSONL pool, and how many non-blank lines were skipped (not JSON, no code)."""
    found, skipped = [], 0
    for line_number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        code = record.get("code") if isinstance(record, dict) else None
        if not isinstance(code, str) or not code.strip():
            skipped += 1
            continue
        # Released pools name the file ("game_00012_005_optimization.py"); keep its stem as the id.
        env_id = Path(str(record.get("game_file") or record.get("env_id") or "")).stem
        env_id = env_id or f"{path.stem}_{line_number:05d}"
        skill = record.get("skill") if isinstance(record.get("skill"), str) else skill_from_name(env_id)
        found.append(Environment(env_id, skill, code))
    return found, skipped


def load_pool(path, *, validate: bool = True) -> list[Environment]:
    """Environments of a directory of .py files or a JSONL file; with `validate`, only those that
    pass `sandbox.validate_env`. Prints "pool: N/M environments valid (K skipped lines)", and a
    WARNING line with the first reasons when some fail: our gate is stricter than the paper's (it
    also checks determinism), so it may drop released games that the official gate accepted."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"environment pool not found: {path} "
                                "(expected a directory of .py files or a .jsonl file)")
    candidates, skipped = (_read_directory(path), 0) if path.is_dir() else _read_jsonl(path)
    valid, rejected = candidates, []
    if validate:
        # Imported here: loading the skill tables must not start the sandbox's fork server.
        from sandbox import validate_env
        valid = []
        for env in candidates:
            result = validate_env(env.code)
            if result.ok:
                valid.append(Environment(env.env_id, env.skill, result.code))
            else:
                rejected.append(f"{env.env_id}: {result.stage}: {result.error[:160]}")
    print(f"pool: {len(valid)}/{len(candidates)} environments valid ({skipped} skipped lines)")
    if rejected:
        print(f"WARNING: {len(rejected)} of {len(candidates)} pool environments failed validation and are "
              "left out; the first: " + " | ".join(rejected[:3]), flush=True)
    return valid
