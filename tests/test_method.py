"""METHOD.md is the map from the paper to the code: every "METHOD N" or "METHOD.md N.M" cited in the
code, the tests and the docs must name one of its headings; every file it names must exist at that path,
or be a file of the official code that its list in 14.1 names; every `module.name` it cites must be defined
there, no private function of ours may be cited, and its section 12 must list every test file."""
import ast
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


FILE_NAME = re.compile(r"`((?:[\w/.-]+/)?[\w.-]+\.(?:py|md|json|sh|yaml))\b")
OFFICIAL_LIST = re.compile(r"^`([\w.-]+/[\w.-]+)` at commit ([0-9a-f]{40})\b[^\n]*:\n((?:(?:- |  )[^\n]*\n?)+)", re.M)
OFFICIAL_SECTION = "### 14.1 "


def official_files():
    """{repository: (commit, the paths of its files that METHOD.md cites)}, from the list at the end of
    section 14: a line "`owner/name` at commit <40 hex digits>...:" and under it the bullets naming the files."""
    text = (ROOT / "METHOD.md").read_text()
    section = text[text.index(OFFICIAL_SECTION):]
    return {m.group(1): (m.group(2), set(FILE_NAME.findall(m.group(3)))) for m in OFFICIAL_LIST.finditer(section)}


def test_every_file_method_md_names_exists():
    text = (ROOT / "METHOD.md").read_text()
    named = set(FILE_NAME.findall(text))
    assert {"spade.py", "regret.py", "agent.py"} <= named
    ours = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
            if not any(part.startswith(".") or part == "out" for part in p.relative_to(ROOT).parts)}
    # The official code's files that the claims about it cite (spade-rl/spade and its Slime submodule, each at
    # the commit the list names) are accepted only as that list names them.
    official = official_files()
    assert set(official) == {"spade-rl/spade", "THUDM/slime"}
    listed = set().union(*(paths for _, paths in official.values()))
    assert len(listed) > 10 and sorted(listed & ours) == []     # an official path never stands for one of ours
    cited = set(FILE_NAME.findall(text[:text.index(OFFICIAL_SECTION)]))
    assert sorted(listed - cited) == []                         # the list holds only files that are cited
    assert sorted(named - ours - listed) == []   # by its path from the root: `backend/engine.py`, not `engine.py`


# Our modules by the name METHOD.md cites them with (`contract.construct`, `launch.divide`, ...).
MODULES = {"spade": "spade.py", "designer": "designer.py", "agent": "agent.py", "gate": "gate.py",
           "regret": "regret.py", "grpo": "grpo.py", "sandbox": "sandbox/__init__.py",
           "contract": "sandbox/contract.py", "forkserver": "sandbox/forkserver.py", "confine": "sandbox/confine.py",
           "engine": "backend/engine.py", "models": "backend/models.py", "launch": "backend/launch.py", "chat": "backend/chat.py",
           "checkpoint": "harness/checkpoint.py", "cli": "harness/cli.py", "report": "harness/report.py", "setup": "harness/setup.py", "plan": "harness/plan.py",
           "fused": "compute/fused.py", "packing": "compute/packing.py", "attention": "compute/attention.py",
           "rlve": "baselines/rlve.py", "envs": "envs/__init__.py", "prompts": "prompts/__init__.py"}
OFFICIAL_NAMES = {"spade.core.envs.tool_use_base_env"}   # the official package path a game may import from
DOTTED = re.compile(r"(?<![\w./])([A-Za-z_]\w*)((?:\.\w+)+)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"(`+)((?:(?!\n\n).)+?)\1", re.S)   # a span may wrap a line, never a paragraph


def cited_spans():
    """Every code span of METHOD.md: the fenced blocks whole, and the inline spans (any run of backticks)."""
    text = (ROOT / "METHOD.md").read_text()
    return FENCE.findall(text) + [m.group(2) for m in INLINE.finditer(FENCE.sub("", text))]


def defined(path):
    """{top-level name: None, or for a class the names its body defines} of one of our modules."""
    def names(body):
        found = {}
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[node.name] = None
            elif isinstance(node, ast.ClassDef):
                found[node.name] = set(names(node.body))
            elif isinstance(node, ast.Assign):
                found.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found[node.target.id] = None
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
        return found
    return names(ast.parse((ROOT / path).read_text()).body)


def citations():
    """(first name, the rest) of every dotted name in a code span whose first name is one of our modules
    or classes, file names (`agent.py`) left out."""
    classes = {name for path in MODULES.values() for name, body in defined(path).items() if body is not None}
    found = set()
    for span in cited_spans():
        for m in DOTTED.finditer(span):
            head, rest = m.group(1), m.group(2)[1:].split(".")
            if m.group(0) in OFFICIAL_NAMES or rest[-1] in ("py", "md", "json", "jsonl", "sh", "yaml"):
                continue
            if head in MODULES or head in classes:
                found.add((head, tuple(rest)))
    return found


def test_every_test_file_is_listed_in_section_12():
    text = (ROOT / "METHOD.md").read_text()
    section = text[text.index("## 12. "):text.index("## 13. ")]
    tests = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py"))
    assert len(tests) > 20 and [t for t in tests if f"`{t}`" not in section] == []


def test_method_md_cites_no_private_function_of_ours():
    found = citations()
    assert ("agent", ("play",)) in found                 # the citations are really read
    dotted = sorted(".".join((head, *rest)) for head, rest in found if any(part.startswith("_") for part in rest))
    private = {name for path in MODULES.values() for name in defined(path) if name.startswith("_")}
    bare = sorted({m.group(1) for span in cited_spans() for m in re.finditer(r"(?<![\w.])(_\w+)", span)
                   if m.group(1) in private})
    # The contract's attribute names (`_tools`, `_state`, `_check_answer`, ...) are the official contract's,
    # not functions of ours: only what our modules define at their top level counts as ours (`_act`).
    assert dotted == [] and bare == []


def test_every_module_name_method_md_cites_is_defined_there():
    modules = {name: defined(path) for name, path in MODULES.items()}
    classes = {}
    for module in modules.values():
        for name, body in module.items():
            if body is not None:
                classes.setdefault(name, set()).update(body)
    unknown = []
    for head, rest in sorted(citations()):
        if head in modules:
            scope, attrs = modules[head], rest
        else:                                             # `EnvOutcome.both_arms`: a class of ours
            scope, attrs = {head: classes[head]}, (head, *rest)
        if attrs[0] not in scope:
            unknown.append(".".join((head, *rest)))
        elif len(attrs) > 1 and scope[attrs[0]] is not None and attrs[1] not in scope[attrs[0]]:
            unknown.append(".".join((head, *rest)))
    assert unknown == []
