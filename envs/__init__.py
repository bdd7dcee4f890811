"""Seed environments and the environment-pool loader.

The skill tables are METHOD.md section 2.2's: six cognitive skills for games (the six the paper's runs
use, in that order) and six tool-use skills, each with the one-line description the designer prompt
renders as "<name> (<description>)". The files beside this one are environments written by us, one
class each, named `<short_name>_<skill_slug>.py` so the skill can be read off the file name exactly as
in the authors' released pools (`game_<rollout:05d>_<index:03d>_<skill_slug>.py`).

`load_pool` reads a directory of such files, a JSONL file with a `code` field per line or the authors'
released pools (METHOD.md 10), validates each through `gate.validate_env` and returns those that pass.
It does not deduplicate, sample or balance skills: that is the designer's business.
"""
import hashlib
import os
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sandbox.contract import PLAY_MAX_TURNS, clean_text, printable, read_json   # clean_text: lone surrogates as U+FFFD

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
    """File-name form of a skill: "API Orchestration" -> "api_orchestration".

    >>> skill_slug("Multi-Step Workflows")
    'multi_step_workflows'
    """
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


_SKILL_BY_SLUG = {skill_slug(name): name for name in {**GAME_SKILLS, **TOOL_SKILLS}}


def skill_from_name(stem: str) -> str:
    """The skill whose slug ends `stem`, longest slug first; UNKNOWN_SKILL if none does.

    >>> skill_from_name("toll_roads_optimization"), skill_from_name("notes")
    ('Optimization', 'unknown')
    >>> skill_from_name("game_00012_005_pattern_recognition")
    'Pattern Recognition'
    """
    matches = [slug for slug in _SKILL_BY_SLUG if stem == slug or stem.endswith("_" + slug)]
    return _SKILL_BY_SLUG[max(matches, key=len)] if matches else UNKNOWN_SKILL


@dataclass
class Environment:
    env_id: str   # file stem, or the JSONL record's game_file / env_id
    skill: str    # a key of GAME_SKILLS or TOOL_SKILLS, or UNKNOWN_SKILL
    code: str     # the environment's Python source (after extraction and repair once validated)


def skill_of(label: str) -> str:
    """A skill given by name or slug ("Optimization", "state_modification") as its name; else unchanged."""
    return _SKILL_BY_SLUG.get(skill_slug(label), label)


# Where released pools' records and manifests name an environment's file.
FILE_KEYS = ("game_file", "file_name", "file", "path", "original_file_name", "env_id", "game_id")


def _records(path: Path) -> tuple[list, int]:
    """The records of a JSON file (a list, or an object whose `environments` are the list) or of a JSONL
    file, and how many lines were skipped (not UTF-8 or not JSON). A byte-order mark is dropped."""
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    if data.lstrip().startswith(b"["):
        return read_json(data), 0
    if data.lstrip().startswith(b"{"):   # one JSON object over several lines, or JSONL
        try:
            whole = read_json(data)
            return (whole["environments"] if isinstance(whole.get("environments"), list) else [whole]), 0
        except ValueError:
            pass
    records, skipped = [], 0
    for line in filter(bytes.strip, data.splitlines()):
        try:
            records.append(read_json(line))
        except ValueError:   # not UTF-8, not JSON, nested too deep
            skipped += 1
    return records, skipped


def _read_jsonl(path: Path) -> tuple[list[Environment], int]:
    """Environments of a JSONL pool, and how many records were skipped (not JSON, no code)."""
    records, skipped = _records(path)
    found = []
    for number, record in enumerate(records, start=1):
        code = record.get("code") if isinstance(record, dict) else None
        if not isinstance(code, str) or not code.strip():
            skipped += 1
            continue
        # Released pools name the file ("game_00012_005_optimization.py"); keep its stem as the id.
        name = next((record[k] for k in FILE_KEYS if isinstance(record.get(k), str)), "")
        env_id = Path(clean_text(name)).stem or f"{path.stem}_{number:05d}"
        skill = clean_text(record["skill"]) if isinstance(record.get("skill"), str) else None
        found.append(Environment(env_id, skill_of(skill) if isinstance(skill, str) else skill_from_name(env_id),
                                 clean_text(code)))   # JSON's "\ud800" is no text a tokenizer takes
    return found, skipped


def _read_directory(path: Path) -> tuple[list[Environment], int]:
    """The .py files of `path` (or, when it has none, of its subfolders, as in a dataset's root), their
    integrity checked against a `checksums.sha256` and their skill read off the name or a manifest; and
    how many files were skipped: not the folder's own (`_own_file`) or not UTF-8 (the first named in a WARNING)."""
    listed = sorted(p for p in path.glob("*.py") if p.name != "__init__.py") or sorted(
        p for p in path.rglob("*.py") if p.name != "__init__.py")
    files = [p for p in listed if _own_file(p, path)]
    verify_checksums(path, files)
    own = set(files)
    skills, found, left_out = _manifest_skills(path), [], [p.name for p in listed if p not in own]
    for file in files:
        try:
            found.append(Environment(file.stem, skills.get(file.name) or skill_from_name(file.stem), _source(file)))
        except UnicodeDecodeError:
            left_out.append(file.name)
    if left_out:
        print(f"WARNING: {len(left_out)} pool file(s) are left out (links, not regular files, over "
              f"{MAX_POOL_FILE_BYTES >> 20} MiB or not UTF-8): {printable(', '.join(left_out[:3]))}", flush=True)
    return found, len(left_out)


MAX_POOL_FILE_BYTES = 1 << 20   # a released game is a few kB


def _own_file(file: Path, folder: Path) -> bool:
    """Whether `file` is a regular file of `folder` or a folder below it, reached through no link, of at most
    MAX_POOL_FILE_BYTES: a pool's folder hands the gate its own files, never one elsewhere (the trainer's)."""
    try:
        info = file.lstat()
        return (stat.S_ISREG(info.st_mode) and info.st_size <= MAX_POOL_FILE_BYTES
                and file.resolve() == folder.resolve() / file.relative_to(folder))
    except (OSError, ValueError):
        return False


def _source(path: Path) -> str:
    """A .py file's text, without a byte-order mark; UnicodeDecodeError when it is not UTF-8."""
    return path.read_bytes().removeprefix(b"\xef\xbb\xbf").decode()


def _beside(path: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` in `path` or its parent (a released pool keeps them beside its `games/` folder)."""
    return next((folder / name for folder in (path, path.parent) for name in names
                 if _own_file(folder / name, folder)), None)


class PoolMismatch(ValueError):
    """The files of a pool are not those its checksums list."""


def verify_checksums(path: Path, files: list[Path]):
    """Check every file of the pool that a `checksums.sha256` (sha256sum's format) beside it lists; a listed
    file of the pool's folder that is missing is an error too (an interrupted download)."""
    listing = _beside(path, ("checksums.sha256",))
    if listing is None:
        return
    expected = {}
    for line in filter(str.strip, listing.read_text().splitlines()):
        digest, _, name = line.strip().partition(" ")
        expected[(listing.parent / name.strip().lstrip("*")).resolve()] = digest.lower()
    ours = {p.resolve() for p in files}
    folder = path.resolve()
    missing = [p.name for p in expected if p not in ours and folder in p.parents and p.suffix == ".py"]
    wrong = [p.name for p in files if p.resolve() in expected
             and hashlib.sha256(p.read_bytes()).hexdigest() != expected[p.resolve()]]
    if missing or wrong:
        raise PoolMismatch(f"{path} does not match {listing}: {len(wrong)} file(s) differ "
                         f"{wrong[:3]}, {len(missing)} listed file(s) missing {missing[:3]}; download the pool again")


def _manifest_skills(path: Path) -> dict[str, str]:
    """File name -> skill from a `manifest.jsonl`/`manifest.json` beside the files, for names that do not carry it."""
    manifest = _beside(path, ("manifest.jsonl", "manifest.json"))
    try:
        records, bad = _records(manifest) if manifest else ([], 0)
    except ValueError:   # optional: the skills then come from the file names
        records, bad = [], "all"
    if bad:
        print(f"WARNING: {manifest} has {bad} line(s) that are not JSON; they are ignored", flush=True)
    skills = {}
    for record in filter(lambda r: isinstance(r, dict) and isinstance(r.get("skill"), str), records):
        for key in FILE_KEYS:
            if isinstance(record.get(key), str):
                skills[Path(record[key]).name] = skill_of(record["skill"])
    return skills


def _distinct_ids(environments: list[Environment]) -> list[Environment]:
    """Ids made printable and UTF-8 (a pool's file names reach the terminal, the log and the report: their control
    and bidirectional characters as escapes) and unique (plays are grouped by id): a second `game_0001`
    becomes `game_0001_2`.

    >>> [e.env_id for e in _distinct_ids([Environment("a", "x", ""), Environment("a", "x", "")])]
    ['a', 'a_2']
    """
    taken = set()
    for env in environments:
        env.env_id, env.skill = printable(clean_text(env.env_id)), printable(clean_text(env.skill))
        base, copies = env.env_id, 1
        while env.env_id in taken:
            copies += 1
            env.env_id = f"{base}_{copies}"
        taken.add(env.env_id)
    return environments


def load_pool(path, *, validate: bool = True, max_turns: int = PLAY_MAX_TURNS) -> list[Environment]:
    """Environments of a directory of .py files, one .py file, or a JSONL (or JSON list) file; with
    `validate`, only those that pass `gate.validate_env` for plays of `max_turns` turns, and it prints
    "pool: N/M environments valid (K skipped)" (lines or files that are not UTF-8, not JSON or without
    code; `load_pool("envs")` gives 18/18), and a WARNING line with the first reasons when some fail:
    our gate is stricter than the paper's (it also checks determinism), so it may drop released games
    that the official gate accepted. Raises ValueError when the files do not match the pool's
    checksums or none is valid.

    The authors' released pools are read as they are: a `games/` folder or the dataset's root, its
    files checked against the `checksums.sha256` beside them, skills read off file names or a
    manifest, and JSON lists of records with `code` and `skill` (a name or a slug). Two environments
    with one name get distinct ids."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"environment pool not found: {path} "
                                "(expected a directory of .py files, a .py file or a .jsonl file)")
    try:
        if path.suffix == ".py":   # one environment (no checksums or manifest: those describe a folder)
            candidates, skipped = [Environment(path.stem, skill_from_name(path.stem), _source(path))], 0
        else:
            candidates, skipped = _read_directory(path) if path.is_dir() else _read_jsonl(path)
    except PoolMismatch:
        raise
    except (ValueError, AttributeError) as e:   # not JSON, not UTF-8, nested too deep
        raise ValueError(f"{path} is not a pool (a directory of .py files, or JSON records with a `code` field): {e}")
    candidates = _distinct_ids(candidates)
    valid, rejected = candidates, []
    if validate:
        # Imported here: loading the skill tables must not start the sandbox's fork server.
        from gate import validate_env
        valid = []
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as workers:  # a child process each
            results = list(workers.map(lambda env: validate_env(env.code, max_turns=max_turns), candidates))
        for env, result in zip(candidates, results):
            if result.ok:
                valid.append(Environment(env.env_id, env.skill, result.code))
            else:
                rejected.append(f"{env.env_id}: {result.stage}: {result.error[:160]}")
        print(f"pool: {len(valid)}/{len(candidates)} environments valid ({skipped} skipped)")
    if rejected and valid:   # none valid: the error below says it once
        print(f"WARNING: {len(rejected)} of {len(candidates)} pool environments failed validation and are "
              "left out; the first: " + " | ".join(rejected[:3]), flush=True)
    if not valid:
        raise ValueError(f"no valid environment in {path}" + (f"; the first failure: {rejected[0]}" if rejected else ""))
    return valid
