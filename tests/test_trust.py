"""What reaches the trainer from outside it is data: a run directory someone else wrote, a released pool
folder, a corpus, the report a person reads, and the parsers of model text. Each test is one attack, judged
from the trainer's side: no code run, no file read outside the folder named, no stall, nothing raw on the
terminal or the page, and a bad file is one sentence (or a skipped line)."""
import json
import pickle
import random
import re
import shutil
import time
from pathlib import Path

import pytest
import torch

import agent
import designer
import regret
from baselines import rlve
from envs import Environment, load_pool
from backend import models
from harness import checkpoint, report
from sandbox.contract import extract_code, printable, read_json, repair_braces
from spade import configure
from test_checkpoint import saved_run

ROOT = Path(__file__).resolve().parents[1]
DEEP, DIGITS = "[" * 5000 + "]" * 5000, "1" * 5000   # nested past the parser's stack; past int()'s 4,300 digits


class Planted:
    """A pickle that creates `marker` when it is unpickled, as any payload that runs code could."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def resumable(run_dir, optimizer_class=torch.optim.SGD):
    """A run directory with checkpoints at steps 2 and 4, and a fresh model and optimizer to resume into."""
    saved_run(run_dir, [2, 4])
    model = models.tiny_model()[0]
    return model, optimizer_class(model.parameters(), lr=0.1)


REFUSED = r"ckpt-00004 cannot be read \(ValueError: it holds objects other than tensors and plain values.*ckpt-00004$"


# --- a run directory: resuming reads data, and only the run's own checkpoints ------------------------------
def test_a_pickle_in_the_loop_state_runs_nothing(tmp_path):
    model, optimizer = resumable(tmp_path / "run")
    torch.save({"state": Planted(tmp_path / "ran")}, tmp_path / "run" / "ckpt-00004" / "state.pt")
    with pytest.raises(SystemExit, match=REFUSED):
        checkpoint.restore(tmp_path / "run" / "ckpt-00004", model, optimizer, None, 0)
    assert not (tmp_path / "ran").exists()


def test_a_pickle_in_the_8bit_moments_runs_nothing(tmp_path):
    eight_bit = type("AdamW8bit", (torch.optim.SGD,), {"__module__": "torchao.optim"})   # as torchao's is named
    model, optimizer = resumable(tmp_path / "run", eight_bit)
    folder = tmp_path / "run" / "ckpt-00004" / "optimizer"
    shutil.rmtree(folder)
    folder.mkdir()
    torch.save(Planted(tmp_path / "ran"), folder / "rank0.pt")
    with pytest.raises(SystemExit, match=REFUSED):
        checkpoint.restore(tmp_path / "run" / "ckpt-00004", model, optimizer, None, 0)
    assert not (tmp_path / "ran").exists()


def test_a_pickle_in_the_dcp_metadata_runs_nothing(tmp_path):
    model, optimizer = resumable(tmp_path / "run")
    (tmp_path / "run" / "ckpt-00004" / "optimizer" / ".metadata").write_bytes(pickle.dumps(Planted(tmp_path / "ran")))
    with pytest.raises(SystemExit, match=REFUSED):
        checkpoint.restore(tmp_path / "run" / "ckpt-00004", model, optimizer, None, 0)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("where", ["absolute", "parent", "link", "linked file"])
def test_a_pointer_to_a_checkpoint_elsewhere_is_refused(tmp_path, where):
    """`latest` naming another run's whole checkpoint (by an absolute path, by `..`, through a link), or a
    checkpoint of the run holding a link to another's file: refused in one sentence, nothing read there."""
    saved_run(tmp_path / "run", [2])
    saved_run(tmp_path / "other", [7])
    other = tmp_path / "other" / "ckpt-00007"
    name = {"absolute": str(other), "parent": "../other/ckpt-00007"}.get(where, "ckpt-00002")
    if where == "link":
        shutil.rmtree(tmp_path / "run" / "ckpt-00002")
        (tmp_path / "run" / "ckpt-00002").symlink_to(other)
    if where == "linked file":
        (tmp_path / "run" / "ckpt-00002" / "state.pt").unlink()
        (tmp_path / "run" / "ckpt-00002" / "state.pt").symlink_to(other / "state.pt")
    pointer = json.loads((tmp_path / "run" / "latest").read_text())
    (tmp_path / "run" / "latest").write_text(json.dumps({**pointer, "checkpoint": name}))
    with pytest.raises(SystemExit, match=r"latest names .*, which is not a checkpoint of .*run \(a ckpt-<step> folder "
                                         r"of its own, holding no link\); the checkpoints kept in .*: ckpt-00002$"):
        checkpoint.read_pointer(tmp_path / "run")


@pytest.mark.parametrize("link", ["config.json", ".latest.tmp", "samples/step_00002"])
def test_a_run_directory_holding_a_link_is_not_resumed(tmp_path, link):
    """A resume writes in the run directory (config.json, metrics.jsonl, the next pointer by way of
    .latest.tmp, the steps' samples): a link there, made by whoever wrote the directory, would have those
    writes land on its target (a linked config.json's would get the config). Refused in one sentence
    naming it, before anything is written."""
    saved_run(tmp_path / "run", [2])
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "run" / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "run" / link).symlink_to(victim / "file" if "." in link else victim)
    with pytest.raises(SystemExit, match=rf"^spade.py: .*run holds a link \({re.escape(repr(Path(link).name))}\)"):
        checkpoint.read_pointer(tmp_path / "run")


def test_the_loop_state_reads_back_as_it_was_saved(tmp_path):
    """Every class the loop state holds comes back through weights_only (checkpoint._state_classes)."""
    episode = agent.Episode("g", "Optimization", True, 3, reward=1.0, status="terminated").outcome()
    sample = designer.DesignerSample([1, 2], [0, 1], [0.0, -0.5], "g", "Optimization", "reply")
    tracker = regret.LearningPotentialTracker()
    tracker.update("Optimization", 0.5)
    rng = random.Random(1)
    state = dict(step=4, pool=[Environment("g", "Optimization", "class GEnv: pass")], order=[1, 0], lengths={"g": 3.0},
                 epoch=regret.Epoch(0, [sample], {"g": [episode]}), tracker=tracker, rng=rng,
                 pool_rng=random.Random(42), blacklist={"h"}, rlve=rlve.Curriculum())
    model, optimizer = resumable(tmp_path)
    checkpoint.save_checkpoint(tmp_path, configure(dict(model="tiny")), model, models.tiny_model()[1], optimizer,
                               None, state, 0)
    resumed = checkpoint.restore(tmp_path / "ckpt-00004", model, optimizer, None, 0)
    assert resumed == {**state, "rng": resumed["rng"], "pool_rng": resumed["pool_rng"]}
    assert resumed["rng"].random() == rng.random()


# --- JSON that a reader must survive: one sentence, or a skipped line -------------------------------------
def test_a_corpus_line_too_deep_or_too_long_is_skipped(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(f'{{"text": "deep", "id": {DEEP}}}\n{{"text": "long", "id": {DIGITS}}}\n{{"text": "kept"}}\n')
    assert designer.load_corpus(corpus, 100).docs == ["kept"]
    assert "1 documents from" in capsys.readouterr().out


@pytest.mark.parametrize("content", [DEEP, DIGITS])
def test_a_memory_too_deep_or_too_long_is_moved_aside(tmp_path, content):
    (tmp_path / "env_memory.json").write_text(content)
    assert designer.EnvMemory(tmp_path / "env_memory.json").records == []
    assert [p.name.split(".corrupt-")[0] for p in tmp_path.iterdir()] == ["env_memory.json"]


@pytest.mark.parametrize("content", [DEEP, DIGITS, '{"version": 3, "step": ' + DIGITS + "}"])
def test_a_pointer_too_deep_or_too_long_is_one_sentence(tmp_path, content):
    saved_run(tmp_path, [2])
    (tmp_path / "latest").write_text(content)
    with pytest.raises(SystemExit, match=r"latest is not a checkpoint pointer; the checkpoints kept in .*: ckpt-00002$"):
        checkpoint.read_pointer(tmp_path)


def test_a_metrics_line_too_deep_is_skipped_by_the_report(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "agent/reward": 0.5}\n' + DEEP + "\n")
    assert [m["step"] for m in report.read_run(tmp_path)[0]] == [0]


# --- a released pool folder: its own regular files, their names shown escaped -----------------------------
def test_a_pool_link_to_a_file_of_the_trainer_is_not_read(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text("TOKEN_hunter2\n")   # as code: NameError: name 'TOKEN_hunter2' is not defined
    secret.chmod(0o600)
    pool = tmp_path / "pool"
    pool.mkdir()
    shutil.copy(ROOT / "envs" / "toll_roads_optimization.py", pool)
    (pool / "leak_optimization.py").symlink_to(secret)
    found = load_pool(pool)
    assert [e.env_id for e in found] == ["toll_roads_optimization"]
    out = capsys.readouterr().out
    assert "hunter2" not in out and "1/1 environments valid (1 skipped)" in out


def test_pool_file_names_reach_the_terminal_escaped(tmp_path, capsys):
    pool = tmp_path / "pool"
    pool.mkdir()
    forged = "\x1b]0;owned\x07\x1b[2J\rstep 9 \u202e"
    shutil.copy(ROOT / "envs" / "toll_roads_optimization.py", pool / f"{forged}a_optimization.py")
    (pool / f"{forged}b_optimization.py").write_text("raise SystemExit('no game')\n")
    found = load_pool(pool)
    out = capsys.readouterr().out
    assert "failed validation" in out and printable(forged) in out
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]", out)
    assert [e.env_id for e in found] == [printable(forged) + "a_optimization"]   # as the blacklist line shows it


# --- code shown to a person: bidirectional controls are visible marks -----------------------------------------
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def test_bidirectional_controls_are_visible_in_the_report_and_the_terminal(tmp_path):
    code = 'secret = 7  # \u202e }; secret = 0 if seed == 3 else secret; {\u2066\nclass GEnv:\n\tpass\n'
    sample = dict(env_id="g\u202e", skill="Optimization", step=0, win_rate=0.5, regret=0.1, code=code, hint="h\u2067",
                  unhinted_status="terminated", unhinted_transcript=[{"role": "user", "content": "obs" + BIDI}],
                  hinted_transcript=[])
    report.write_html(tmp_path, [], [sample], [], tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    assert not any(c in page for c in BIDI) and "\\u202e }; secret = 0" in page and "\\u2066\nclass GEnv:\n\tpass" in page
    assert not any(c in printable("SyntaxError: " + BIDI) for c in BIDI)


def test_a_report_shows_only_records_as_a_run_writes_them(tmp_path, capsys):
    # A run directory from someone else: markup where the page prints a number, types the page cannot format,
    # a metric that is no number, and a folder that is no step's. Each is left out and counted, none raw.
    script = "<script>alert(1)</script>"
    good = dict(env_id="g", skill="Optimization", step=0, win_rate=0.5, regret=0.1, code="class GEnv: pass",
                hint="h", unhinted_transcript=[], hinted_transcript=[])
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "agent/reward": 0.5}\n{"step": 1, "agent/reward": "x"}\n')
    folder = tmp_path / "samples" / "step_00000"
    folder.mkdir(parents=True)
    for name, record in [("game_a", good), ("game_b", dict(good, step=script)), ("game_c", dict(good, win_rate="1")),
                         ("game_d", dict(good, hinted_transcript=["not a message"]))]:
        (folder / f"{name}.json").write_text(json.dumps(record))
    rejected = dict(skill="Optimization", attempt=1, stage="load", error="e")
    (folder / "rejected.json").write_text(json.dumps([rejected, dict(rejected, attempt=script)]))
    play = dict(env_id="g", reward=1.0, win_rate=0.5, status="terminated", transcript=[])
    (folder / "plays.json").write_text(json.dumps([play, dict(play, reward=True), dict(play, win_rate=None)]))
    (tmp_path / "samples" / "step_x").mkdir()
    (tmp_path / "samples" / "step_x" / "game_e.json").write_text(json.dumps(good))
    report.main([str(tmp_path)])
    assert "skipped 7 lines, files or records" in capsys.readouterr().out
    page = (tmp_path / "report" / "index.html").read_text()
    assert script not in page and page.count("<section>") == 1 and "attempt 1" in page and "this play +1.00" in page


def test_a_report_writes_through_no_link_of_a_downloaded_run(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("kept")
    run = tmp_path / "run"
    (run / "report").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 0, "agent/reward": 0.5}\n')
    (run / "report" / "index.html").symlink_to(victim)
    with pytest.raises(SystemExit, match="report: .*report is or holds a link; the report writes through none"):
        report.main([str(run)])
    assert victim.read_text() == "kept"


# --- parsers of model and environment text: linear in their input -----------------------------------------
N = 100_000
PARSERS = [
    ("designer.parse_hint", designer.parse_hint, "```json" + "\n" * N + "x"),
    ("designer.parse_hint", designer.parse_hint, "<think>" * (N // 7)),
    ("designer.parse_hint", designer.parse_hint, "```json \n" * (N // 9)),
    ("designer.accepts", designer.accepts, "<think>" + "\\boxed{" * (N // 7)),
    ("agent.game_action", agent.game_action, "\\boxed{" + "{" * N),
    ("agent.game_action", agent.game_action, "\\boxed{" + "{a}" * (N // 3)),
    ("agent.game_action", agent.game_action, "\\boxed{ }" * (N // 9)),
    ("agent.parse_tool_turn", agent.parse_tool_turn, "<tool_call><function=" * (N // 21)),
    ("agent.parse_tool_turn", agent.parse_tool_turn, "<tool_call>" + "[" * N + "</tool_call>"),
    ("contract.extract_code", extract_code, "```python\n" * (N // 10)),
    ("contract.repair_braces", repair_braces, 'x = f"' + "{a b}" * (N // 5) + '"\n'),
    ("contract.repair_braces", repair_braces, "y = " + " f'" * (N // 3) + ' f"\n'),
    ("contract.printable", printable, "\x1b\u202e" * N),
    ("contract.read_json", lambda text: pytest.raises(ValueError, read_json, text), "[" * N),
]


@pytest.mark.parametrize("name, parse, text", PARSERS, ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(PARSERS)])
def test_each_parser_of_model_text_is_linear(name, parse, text):
    """100 kB of the input a backtracking pattern is worst at, well under a second (a quadratic one takes
    minutes: parse_hint's regex took a second for 10 kB of newlines after an unclosed ```json)."""
    start = time.perf_counter()
    parse(text)
    assert time.perf_counter() - start < 1.5, name


def test_a_hint_is_read_as_the_official_regexes_read_it():
    rng = random.Random(0)
    pieces = ["<think>", "</think>", "```json", "```", "\n", " ", "x", '{"hint": "h"}', "`", "\t"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        block = re.search(r"```json\s*\n(.*?)```", text, flags=re.DOTALL)
        assert designer._json_block(text) == (block.group(1) if block else None), text
        unthought = re.sub(r"<think>.*?(</think>|$)", "", text, flags=re.DOTALL)
        assert designer._without_thinking(text).strip() == unthought.strip(), text
