"""report.py: what Log writes is what the report reads, and the page shows environments and rejections."""
import doctest
import json
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from harness import report


@dataclass
class FakeEpisode:  # the fields of agent.Episode that the log reads
    env_id: str
    messages: list
    status: str = "terminated"
    error: str = None


def test_log_then_report(tmp_path, capsys):
    cfg = SimpleNamespace(wandb=False, run="r", steps=10, regen_interval=4)
    log = report.Log(tmp_path, cfg)
    env = SimpleNamespace(env_id="game_00000_000_optimization", skill="Optimization", code="class KnapEnv:\n    pass\n")
    regen = SimpleNamespace(envs=[env], hints=["Weigh before you load."], rejected=[
        dict(slot=1, skill="Optimization", attempt=1, stage="syntax", error="SyntaxError: bad", response="def (")],
        hinted=[FakeEpisode(env.env_id, [{"role": "user", "content": "obs HINT: weigh"}])])
    episodes = [FakeEpisode(env.env_id, [{"role": "user", "content": "obs"}, {"role": "assistant", "content": "\\boxed{x}"}])]
    log.samples(0, regen, episodes, {env.env_id: dict(win_rate=0.5, regret=0.25)})
    extra = {"designer/regret": 0.25, "designer/env_lines": 2.0}
    for step in range(3):
        log.step({"step": step, "seconds": 1.0, "agent/reward": 0.1 * step, "designer/valid_rate": 0.5, **extra,
                  "sync/logprob_gap": [3e-7, 1e-6, 2e-7][step]})
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
    assert [line.rsplit("| ", 1)[1] for line in lines] == ["eta 9s", "eta 8s", "eta 7s"]  # 1 s a step, 10 steps
    assert "| gap 1e-06 |" in lines[1]
    report.main([str(tmp_path)])
    page = (tmp_path / "report" / "index.html").read_text()
    assert env.env_id in page and "Weigh before you load." in page and "class KnapEnv" in page
    assert "Rejected designer attempts (1)" in page and "SyntaxError: bad" in page and "\\boxed{x}" in page
    assert "engine and trainer: at most 1e-06 nats per token apart on the fixed probe (step 1;" in page
    assert (tmp_path / "report" / "curriculum.png").stat().st_size > 10_000
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]


def test_two_runs_in_one_picture(tmp_path, capsys):
    # A learning run and its control (--lr 0): their agent rewards in one panel, in the first run's report/.
    for name, lr, rewards in [("learn", 5e-5, [0.1, 0.5, 0.9]), ("control", 0.0, [0.1, 0.1, 0.2])]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(dict(lr=lr)))
        (tmp_path / name / "metrics.jsonl").write_text("".join(
            json.dumps({"step": step, "agent/reward": r}) + "\n" for step, r in enumerate(rewards)))
    report.main([str(tmp_path / "learn"), str(tmp_path / "control")])
    assert (tmp_path / "learn" / "report" / "runs.png").stat().st_size > 10_000
    assert "runs.png" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="usage"):
        report.main([str(tmp_path / "learn"), "--bad"])
    for damaged in ('{"lr": 5e-', '{"lr": "fast"}', "[1, 2]"):   # a config.json cut short or not a run's: no label
        (tmp_path / "control" / "config.json").write_text(damaged)
        report.main([str(tmp_path / "learn"), str(tmp_path / "control")])


def test_two_runs_whose_first_is_no_run_directory_is_one_sentence(tmp_path):
    # The picture of several runs goes in the first one's report/: a first that is missing or a file is the
    # sentence of a directory that is no run, not a FileNotFoundError from making report/ in it.
    (tmp_path / "control").mkdir()
    (tmp_path / "control" / "metrics.jsonl").write_text(json.dumps({"step": 0, "agent/reward": 0.1}) + "\n")
    (tmp_path / "a-file").write_text("")
    for first in ("missing", "a-file"):
        with pytest.raises(SystemExit, match=f"^report: .*{first} has no metrics.jsonl"):
            report.main([str(tmp_path / first), str(tmp_path / "control")])
    assert not (tmp_path / "missing").exists()


def test_a_resume_forgets_what_the_steps_after_its_checkpoint_wrote(tmp_path):
    log = report.Log(tmp_path, SimpleNamespace(wandb=False, steps=10, regen_interval=4))
    for step in range(5):
        log.step({"step": step, "seconds": 1.0})
        (tmp_path / "samples" / f"step_{step:05d}").mkdir(parents=True)
    (tmp_path / "samples" / "step_\u00b2").mkdir()             # a digit int() does not read: not a step's
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "agent/rew')                   # a kill in the middle of a line
    log.rewind(3)                                            # resumed from the checkpoint of step 3
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["step_00000", "step_00001", "step_00002"]


def test_the_report_of_a_run_cut_short_skips_what_it_cannot_read(tmp_path, capsys):
    log = report.Log(tmp_path, SimpleNamespace(wandb=False, steps=10, regen_interval=4))
    log.step({"step": 0, "seconds": 1.0, "agent/reward": 0.5})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('[1, 2]\n{"step": 1, "agent/rew')
    (tmp_path / "samples" / "step_00000").mkdir(parents=True)
    (tmp_path / "samples" / "step_00000" / "rejected.json").write_text('[{"slot": 0, "sta')
    report.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "skipped 3 lines, files or records" in out and "(1 steps, 0 environments)" in out
    for path in (tmp_path / "report").iterdir():
        path.unlink()
    (tmp_path / "report").rmdir()
    (tmp_path / "report").write_text("")                     # a file where the report's folder goes
    with pytest.raises(SystemExit, match="report: cannot write .*report: File exists"):
        report.main([str(tmp_path)])


def test_a_folder_where_a_dumped_record_goes_is_skipped_and_counted(tmp_path, capsys):
    # A run directory is data: a folder named as a step's dumped file (game_*.json, rejected.json) is no
    # record, skipped and counted as one a kill cut short, not an IsADirectoryError.
    log = report.Log(tmp_path, SimpleNamespace(wandb=False, steps=10, regen_interval=4))
    log.step({"step": 0, "seconds": 1.0, "agent/reward": 0.5})
    for name in ("game_00000_000_x.json", "rejected.json"):
        (tmp_path / "samples" / "step_00000" / name).mkdir(parents=True)
    report.main([str(tmp_path)])
    assert "skipped 2 lines, files or records" in capsys.readouterr().out


def test_the_command_line_says_how_to_use_it(tmp_path, capsys):
    report.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python spade.py report out/<run>")
    with pytest.raises(SystemExit, match="^usage: "):
        report.main([])
    with pytest.raises(SystemExit, match="has no metrics.jsonl .is it a spade run directory"):
        report.main([str(tmp_path)])


def test_docstring_examples():
    assert doctest.testmod(report).failed == 0


def test_the_report_says_which_isolation_layer_was_missing(tmp_path):
    # Where the jail could not be built, the page says so plainly, as the run's header did.
    (tmp_path / "config.json").write_text(json.dumps({"sandbox": "namespaces, uid; MISSING jail (bubblewrap is not installed)"}))
    report.write_html(tmp_path, [], [], [], tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    assert 'style="color:#b00;font-weight:bold">sandbox: namespaces, uid; MISSING jail (bubblewrap is not installed)' in page
    (tmp_path / "config.json").write_text(json.dumps({"sandbox": "jail, namespaces, memory, uid, syscalls"}))
    report.write_html(tmp_path, [], [], [], tmp_path / "index.html")
    assert "<p>sandbox: jail, namespaces, memory, uid, syscalls</p>" in (tmp_path / "index.html").read_text()


def test_the_eta_counts_design_and_hints_only_on_the_regen_steps_left(tmp_path, capsys):
    # 6 steps, R 3: step 0 spends 8 of its 10 s on design and hints; step 1 takes 2 s; step 3 designs again.
    log = report.Log(tmp_path, SimpleNamespace(wandb=False, steps=6, regen_interval=3))
    log.step({"step": 0, "seconds": 10.0, "time/design": 7.0, "time/hints": 1.0})
    log.step({"step": 1, "seconds": 2.0})
    etas = [line.rsplit("eta ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert etas == ["18s", "16s"]    # 5 x 2 s + 8 s, then 4 x 2 s + 8 s (the mean pace: 50s, then 24s)


def test_the_panels_are_drawn_on_their_ranges_and_a_run_without_a_valid_environment_says_so(tmp_path):
    flat = [{"step": s, "agent/reward": 0.0, "designer/valid_rate": 0.0, "agent/band_share": 0.0,
             "designer/regret": 0.0} for s in range(3)]
    fig = report.plot_curriculum(flat, tmp_path / "c.png", report.no_valid_note(flat, []))
    limits = {key: ax.get_ylim() for (key, _, _), ax in zip(report.CURVES, fig.axes)}
    assert limits["agent/reward"][0] < -0.99 and limits["agent/reward"][1] > 0.99
    assert limits["designer/regret"][0] < -0.99 and limits["designer/regret"][1] > 0.99
    for share in ("designer/valid_rate", "agent/band_share"):
        assert -0.1 < limits[share][0] < 0 and 1 < limits[share][1] < 1.1
    assert "no valid environment" in fig.texts[0].get_text()
    report.write_html(tmp_path, flat, [], [], tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    assert page.index("The designer wrote no valid environment in this run") < page.index("curriculum.png")
    assert "<tr><th>agent</th><td>reward 0 · band_share 0</td></tr><tr><th>designer</th>" in page
    assert not report.no_valid_note([{"step": 0, "agent/reward": 0.5}], [])      # a baseline: no designer
