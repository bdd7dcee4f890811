"""METHOD.md is the map from the paper to the code: every "METHOD N" or "METHOD.md N.M" cited in the
code, the tests and the docs must name one of its headings, and every file it names must exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"METHOD(?:\.md)?,? (?:sections? |§)?(\d+(?:\.\d+)?)")


def headings():
    return {m.group(1) for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", (ROOT / "METHOD.md").read_text(), re.M)}


def cited():
    files = [*ROOT.glob("*.py"), *ROOT.glob("*/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("bench/*"), *ROOT.glob("*.md"),
             *ROOT.glob("envs/**/*.py"), *ROOT.glob("prompts/*")]
    return {(path.relative_to(ROOT).as_posix(), m.group(1))
            for path in files if path.is_file() for m in CITATION.finditer(path.read_text(errors="replace"))}


def test_every_method_citation_names_a_heading():
    known = headings()
    assert {"0", "1.1", "6.2", "14"} <= known
    found = cited()
    assert len(found) > 50                      # the citations are really read
    assert sorted((path, section) for path, section in found if section not in known) == []


def test_every_file_method_md_names_exists():
    named = set(re.findall(r"`((?:[\w/.-]+/)?[\w.-]+\.(?:py|md|json|sh))\b", (ROOT / "METHOD.md").read_text()))
    assert {"spade.py", "regret.py", "agent.py"} <= named
    ours = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
            if not any(part.startswith(".") or part == "out" for part in p.relative_to(ROOT).parts)}
    ours |= {name.rsplit("/", 1)[-1] for name in ours}
    assert sorted(named - ours) == []
