"""End to end: the real spade.py as a subprocess with the tiny model, a couple of steps each."""
import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness import checkpoint, cli

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--model", "tiny", "--steps", "2", "--regen-interval", "2", "--num-envs", "2", "--plays-per-env", "2",
        "--max-new-tokens", "16", "--max-turns", "2", "--lr", "1e-3"]


def spade(*args, timeout=300, **kwargs):
    return subprocess.run([sys.executable, str(ROOT / "spade.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def final_weights(run_dir):
    from safetensors.torch import load_file
    latest = json.loads((run_dir / "latest").read_text())
    return load_file(str(run_dir / latest["checkpoint"] / "model" / "model.safetensors")), latest


def assert_trained(run_dir, steps):
    from backend import models
    initial, _ = models.load_model("tiny")
    weights, latest = final_weights(run_dir)
    assert latest["step"] == steps
    changed = [name for name, p in initial.state_dict().items() if name in weights and not torch.equal(p, weights[name])]
    assert len(changed) >= len(weights) // 2, f"only {len(changed)} of {len(weights)} tensors changed"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(steps))
    assert (run_dir / "report" / "index.html").is_file() and (run_dir / "report" / "curriculum.png").is_file()
    return metrics


def test_self_play_two_steps(tmp_path):
    result = spade(*FAST, "--out", str(tmp_path / "selfplay"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "selfplay"
    metrics = assert_trained(run_dir, 2)
    assert "designer/valid_rate" in metrics[0] and "agent/reward" in metrics[0]
    # The engine is the trainer's own model: the probe before each step finds no gap (harness/sync.py)
    assert all(m["sync/logprob_gap"] <= 1e-6 and m["time/probe"] > 0 for m in metrics) and "| gap 0 |" in result.stdout
    memory = json.loads((run_dir / "env_memory.json").read_text())
    assert len(memory) >= 1     # seeded from envs/easy/ (the preset's easy game), then the new environments
    assert "step    0 |" in result.stdout and "designer:" in result.stdout
    plays = json.loads((run_dir / "samples" / "step_00000" / "plays.json").read_text())   # topped-up seeds too
    page = (run_dir / "report" / "index.html").read_text()
    assert plays and all(p["env_id"] in page and "win_rate" in p for p in plays) and f"Plays ({len(plays)})" in page


def test_thinking_mode_self_play(tmp_path):
    # --thinking on with the tiny model (its template has no thinking switch; the per-turn prompts and
    # samples run all the same): the loop trains on per-turn samples.
    result = spade(*FAST, "--thinking", "on", "--pool", str(ROOT / "envs"), "--out", str(tmp_path / "think"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = assert_trained(tmp_path / "think", 2)
    assert json.loads((tmp_path / "think" / "config.json").read_text())["thinking"] == "on"
    assert all(m["agent/samples"] >= 1 for m in metrics)


def test_tool_use_self_play(tmp_path):
    # The tool-use setting end to end: its skills, prompts, the solvability audit's wiring (the tiny
    # model's code rarely reaches it), tool-call plays of the topped-up pool, the compact filter; and
    # the no-corpus ablation.
    result = spade(*FAST, "--setting", "tool_use", "--skills", "Data Retrieval,Error Recovery", "--corpus", "none",
                   "--out", str(tmp_path / "tools"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # The random model's replies rarely end within 16 tokens, and the compact filter leaves truncated
    # plays out of training: the weights may well not move, so only the run itself is checked.
    _, latest = final_weights(tmp_path / "tools")
    metrics = [json.loads(line) for line in (tmp_path / "tools" / "metrics.jsonl").read_text().splitlines()]
    assert latest["step"] == 2 and [m["step"] for m in metrics] == [0, 1]
    assert "designer/valid_rate" in metrics[0] and "topping up the pool" in result.stdout


def test_fixed_rlve_baseline(tmp_path):
    # METHOD 10: RLVE's verifiable environments with their adaptive difficulty, no designer; the
    # curriculum is saved with the checkpoint.
    result = spade(*FAST, "--rlve", "--num-envs", "3", "--out", str(tmp_path / "rlve"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = assert_trained(tmp_path / "rlve", 2)
    assert "designer/valid_rate" not in metrics[0] and metrics[-1]["rlve/max_top_level"] == 0
    assert "| rlve level 0.00 |" in result.stdout
    assert not (tmp_path / "rlve" / "env_memory.json").exists()
    _, latest = final_weights(tmp_path / "rlve")
    state = torch.load(tmp_path / "rlve" / latest["checkpoint"] / "state.pt", weights_only=False)["state"]
    curriculum = state["rlve"]
    assert curriculum.next_seed >= 6 and sum(n for n, _ in curriculum.counted.values()) == 2 * 3 * 2   # all at level 0
    plays = json.loads((tmp_path / "rlve" / "samples" / "step_00000" / "plays.json").read_text())
    assert len(plays) == 3 and all(p["skill"] == "RLVE" and p["transcript"][0]["role"] == "user" for p in plays)
    page = (tmp_path / "rlve" / "report" / "index.html").read_text()
    assert "Plays (3)" in page and plays[0]["env_id"] in page and "A baseline run: no designer." in page


def test_fixed_pool_baseline(tmp_path):
    result = spade(*FAST, "--pool", str(ROOT / "envs"), "--out", str(tmp_path / "pool"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = assert_trained(tmp_path / "pool", 2)
    assert "designer/valid_rate" not in metrics[0]
    assert not (tmp_path / "pool" / "env_memory.json").exists()
    plays = json.loads((tmp_path / "pool" / "samples" / "step_00000" / "plays.json").read_text())
    assert len(plays) == 2 and all(p["transcript"] and p["status"] in ("terminated", "truncated") for p in plays)


def test_the_whole_loop_learns_a_learnable_game(tmp_path):
    """spade.py itself, not grpo.update alone: agent.play -> batch -> grpo.update -> the weight push must
    raise the tiny model's reward on a two-turn game (masks and log-probs across turns, advantages per
    environment): from <= 0.3 at the first step to >= 0.7 over the last three of 20."""
    game = ROOT / "tests" / "fixtures" / "learnable" / "number_after_anything.py"
    result = spade("--model", "tiny", "--pool", str(game), "--steps", "20", "--plays-per-env", "32",
                   "--max-new-tokens", "8", "--max-turns", "2", "--temperature", "1.0", "--top-p", "1.0",
                   "--top-k", "0", "--lr", "3e-3", "--save-every", "1000", "--out", str(tmp_path / "learn"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rewards = [json.loads(line)["agent/reward"] for line in (tmp_path / "learn" / "metrics.jsonl").read_text().splitlines()]
    assert len(rewards) == 20 and rewards[0] <= 0.3 and sum(rewards[-3:]) / 3 >= 0.7, rewards


def test_resume_after_sigkill_keeps_memory_and_step(tmp_path):
    # One regen step (step 0) then plain steps, a checkpoint after every step; killed mid-step (the tiny
    # model's steps take a tenth of a second: enough of them that the run is still going when killed).
    # With a KL term, whose reference must stay the initial model after the resume.
    steps = 12
    args = [*FAST, "--steps", str(steps), "--regen-interval", str(steps), "--save-every", "1", "--kl-coef", "0.005",
            "--out", str(tmp_path / "r")]
    run_dir = tmp_path / "r"
    process = subprocess.Popen([sys.executable, str(ROOT / "spade.py"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not (run_dir / "latest").exists():
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    latest = json.loads((run_dir / "latest").read_text())
    saved, saved_memory = latest["step"], json.loads((run_dir / latest["checkpoint"] / "env_memory.json").read_text())
    assert 1 <= saved < steps and len(saved_memory) > 0
    (run_dir / "env_memory.json").write_text("[]")     # whatever the killed step left behind is not trusted
    result = spade("--resume", str(run_dir))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"resumed {run_dir} at step {saved}" in result.stdout
    assert json.loads((run_dir / "latest").read_text())["step"] == steps
    assert json.loads((run_dir / "env_memory.json").read_text()) == saved_memory   # no regen step after 0
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(steps))        # the killed step's line, if any, is gone
    assert all(m["sync/logprob_gap"] <= 1e-6 for m in metrics)   # the resumed engine probed before its first step
    # The first resumed step's policy has trained weights: its KL to the initial model is not 0 (a
    # reference copied from the resumed weights would give exactly 0).
    assert metrics[0]["grpo/kl"] == 0 and metrics[-(steps - saved)]["grpo/kl"] > 0


def test_ctrl_c_saves_a_checkpoint(tmp_path):
    args = [*FAST, "--pool", str(ROOT / "envs"), "--steps", "50", "--save-every", "100", "--out", str(tmp_path / "c")]
    process = subprocess.Popen([sys.executable, str(ROOT / "spade.py"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "c" / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not metrics.exists():
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output[-3000:]
    saved = json.loads((tmp_path / "c" / "latest").read_text())["step"]
    assert 1 <= saved < 50 and f"interrupted: saved step {saved}" in output


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-org/no-such-model"], "smollm2-135m"),
    (["--pool", "/nonexistent/pool"], "pool not found"),
    (["--corpus", "/nonexistent/docs.jsonl"], "corpus file not found"),
    (["--plays-per-env", "1"], "at least 2"),
    (["--regen-interval", "0"], "spade.py: --regen-interval must be positive\n"),   # the flag given, alone
    (["--setting", "tool-use"], "--setting must be one of games, tool_use, not 'tool-use'"),   # not a skills error
    (["--plateau-band", "0.6,0.4,0.25"], "--plateau-band must be lo,hi,ramp"),
    (["--designer-reward", "vibes"], "--designer-reward must be one of blend, solve_rate, "),
    (["--skills", "Juggling"], "unknown games skill"),
    (["--skills", "Optimization,Logical Deduction,Optimization"], "--skills names a skill twice"),
    (["--resume", "/nonexistent/run"], "no checkpoint to resume in /nonexistent/run (--resume takes a run's"),
    (["--thinking", "maybe"], "--thinking must be one of on, off, not 'maybe'"),
    (["--tp", "-1"], "--tp must be 0"),
    (["--tp", "2"], "--tp 2 needs --engine vllm and as many ranks"),
    (["--rlve", "--pool", str(ROOT / "envs")], "--rlve and --pool are two baselines"),
    (["--pool", str(ROOT / "README.md")], "no valid environment in"),         # no record holds code
    (["--out", str(ROOT / "README.md")], "README.md as the run's directory: File exists"),
])
def test_bad_arguments_fail_with_one_sentence(args, message, tmp_path):
    result = spade("--model", "tiny", "--out", str(tmp_path), *args, timeout=120,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode != 0
    assert message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--temperature", "0"], "--temperature > 0"), (["--top-p", "0"], "0 < --top-p <= 1"),
    (["--top-k", "-1"], "--top-k >= 0"), (["--save-every", "-1"], "--save-every"),
    (["--max-turns", "0"], "--max-turns"), (["--max-new-tokens", "0"], "--max-new-tokens must be positive"),
    (["--max-context", "10"], "--max-context must be at least 1024"), (["--lr", "-1"], "--lr and --kl-coef must be at least 0"),
    (["--steps", "-1"], "spade.py: --steps must be positive"), (["--engine", "x"], "--engine must be one of auto,"),
    (["--kl-coef", "-1"], "--lr and --kl-coef must be at least 0"), (["--seed", str(2**64)], "--seed must be in"),
    (["--rlve", "--setting", "tool_use"], "--rlve is a baseline of the games setting"),
    # infinity is no rate: --lr inf makes the weights nan in the first update, --temperature inf samples uniformly
    (["--lr", "inf"], "--lr and --kl-coef must be at least 0 and finite"),
    (["--kl-coef", "inf"], "--lr and --kl-coef must be at least 0 and finite"),
    (["--temperature", "inf"], "a finite --temperature > 0"),
    (["--out", ""], "--out must name the run's directory"),   # not the working one ("" is "."), made 0700
])
def test_a_knob_out_of_its_range_is_one_sentence_before_anything_loads(args, message):
    from spade import parse_config
    with pytest.raises(SystemExit, match=re.escape(message)):
        parse_config(["--model", "tiny", *args])
    assert parse_config(["--model", "tiny", "--out", "out/{time}-a{b}"]).out.endswith("-a{b}")   # only {time}


def fake_checkpoint(run_dir, name="ckpt-00002"):
    for part in ("model", "state.pt", "env_memory.json", "optimizer"):   # what read_pointer looks for
        (run_dir / name / part).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name / part).touch()


def test_a_resumed_run_keeps_its_config_and_may_run_longer(tmp_path):
    from spade import configure, parse_config
    saved = dataclasses.asdict(configure(dict(model="tiny", steps=2, lr=1e-5)))
    fake_checkpoint(tmp_path)
    (tmp_path / "latest").write_text(json.dumps({"version": checkpoint.VERSION, "checkpoint": "ckpt-00002", "step": 2, "config": saved}))
    with pytest.raises(SystemExit, match=r"--lr \(saved: 1e-05\) cannot change"):   # refused, not ignored
        parse_config(["--resume", str(tmp_path), "--steps", "4", "--lr", "1e-3"])
    with pytest.raises(SystemExit, match="at step 2 already: give more --steps"):
        parse_config(["--resume", str(tmp_path)])
    cfg = parse_config(["--resume", str(tmp_path), "--steps", "4", "--save-every", "1", "--model", "tiny"])
    assert (cfg.steps, cfg.save_every, cfg.resume) == (4, 1, str(tmp_path))
    assert {**dataclasses.asdict(cfg), "steps": 2, "save_every": saved["save_every"], "resume": ""} == saved
    assert cfg.unflagged.designer_max_tokens == 256                      # the tables apply to a resumed run too
    again = ["--model", "tiny", "--steps", "4", "--lr", "1e-5"]        # the original command line again
    assert parse_config(["--resume", str(tmp_path), *again]).steps == 4
    # --wandb is this invocation's (a run logged to W&B resumes where wandb is missing); a config written
    # by another version: knobs it lacks take their defaults, one it has that we do not is one sentence.
    older = {k: v for k, v in saved.items() if k != "top_k"}
    (tmp_path / "latest").write_text(json.dumps({"version": checkpoint.VERSION, "checkpoint": "ckpt-00002", "step": 2,
                                                 "config": {**older, "wandb": True}}))
    assert parse_config(["--resume", str(tmp_path), "--steps", "4"]).wandb is False
    (tmp_path / "latest").write_text(json.dumps({"checkpoint": "ckpt-00002", "step": 2, "config": saved}))
    with pytest.raises(SystemExit, match=rf"another version of spade.py \(checkpoint version 1, this one reads {checkpoint.VERSION}\)"):
        parse_config(["--resume", str(tmp_path), "--steps", "4"])           # an earlier version's: refused
    (tmp_path / "latest").write_text(json.dumps({"version": checkpoint.VERSION, "checkpoint": "ckpt-00002", "step": 2,
                                                 "config": {**saved, "beam_width": 4}}))
    with pytest.raises(SystemExit, match="written by another version of spade.py .*beam_width"):
        parse_config(["--resume", str(tmp_path), "--steps", "4"])
    # A fork's setting (the toy's) is named, not refused as a --setting the user never gave.
    (tmp_path / "latest").write_text(json.dumps({"version": checkpoint.VERSION, "checkpoint": "ckpt-00002", "step": 2,
                                                 "config": {**saved, "setting": "toy"}}))
    with pytest.raises(SystemExit, match=f"is a run of the setting 'toy'.*python -m toy --resume {tmp_path}"):
        parse_config(["--resume", str(tmp_path), "--steps", "4"])


def test_a_saved_config_whose_knob_has_the_wrong_type_is_one_sentence(tmp_path):
    """A run directory is data: a `latest` whose config gives a knob a value of another type (a string of
    steps, a null model, a list setting, true as a count) is refused in one sentence naming the knob, not a
    TypeError or AttributeError from deep in derive() or the layers."""
    from spade import configure, parse_config
    saved = dataclasses.asdict(configure(dict(model="tiny", steps=2)))
    fake_checkpoint(tmp_path)
    for knob, value in [("steps", "4"), ("model", None), ("setting", ["games"]), ("num_envs", True),
                        ("plateau_band", 3), ("rlve", "no"), ("corpus", 3)]:
        (tmp_path / "latest").write_text(json.dumps({"version": checkpoint.VERSION, "checkpoint": "ckpt-00002",
                                                     "step": 2, "config": {**saved, knob: value}}))
        with pytest.raises(SystemExit, match=f"spade.py: .*latest is not a checkpoint pointer: its {knob} is"):
            parse_config(["--resume", str(tmp_path), "--steps", "4"])
    (tmp_path / "latest").write_text(json.dumps({"version": checkpoint.VERSION, "checkpoint": "ckpt-00002",
                                                 "step": 2, "config": {**saved, "lr": 1}}))   # an int is a float
    assert parse_config(["--resume", str(tmp_path), "--steps", "4"]).lr == 1


def test_a_saved_config_without_steps_resumes(tmp_path):
    # A config of another version may lack a knob (its default then holds, as the layers give it): --steps
    # too, which the set-up reads back to tell whether a finished run is extended; no KeyError there.
    result = spade(*FAST, "--steps", "1", "--out", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr[-3000:]
    latest = json.loads((tmp_path / "r" / "latest").read_text())
    del latest["config"]["steps"]
    (tmp_path / "r" / "latest").write_text(json.dumps(latest))
    result = spade("--resume", str(tmp_path / "r"), "--steps", "2")
    assert result.returncode == 0 and f"resumed {tmp_path / 'r'} at step 1" in result.stdout, result.stderr[-3000:]


def test_a_resume_of_a_run_that_has_no_checkpoint_yet_names_the_process_that_holds_it(tmp_path):
    from harness import checkpoint
    from spade import parse_config
    checkpoint.claim(tmp_path, resuming=False)                        # as a run still starting holds it
    with pytest.raises(SystemExit, match=f"another process is running in {tmp_path}, which has no checkpoint yet"):
        parse_config(["--resume", str(tmp_path), "--steps", "4"])


def test_a_python_without_the_packages_is_told_where_they_are():
    result = subprocess.run([sys.executable, "-S", str(ROOT / "spade.py"), "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)                    # -S: no site-packages, as outside the venv
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "No module named" in result.stderr and "run it with .venv/bin/python" in result.stderr


def test_a_model_that_does_not_load_leaves_no_run_directory(tmp_path):
    result = spade("--model", "does-not-exist", "--out", str(tmp_path / "run"), timeout=120,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_help_shows_what_a_plain_run_uses_and_where_it_comes_from_in_the_readmes_groups(capsys):
    import spade
    with pytest.raises(SystemExit):
        spade.parse_config(["--help"])
    raw = capsys.readouterr().out
    text = " ".join(raw.split())                                      # argparse wraps the help
    assert "--steps N rollout steps (= policy updates) [12, embedded; default 400]" in text
    assert "--lr X AdamW learning rate (constant; 0: a control that never learns) [5e-05, embedded; default 1e-06]" in text
    assert "[0.6, default]" in text and "(default: " not in text
    assert "--setting {games,tool_use}" in text and "--thinking {on,off}" in text and "--engine {auto,hf,vllm}" in text
    assert "--designer-reward {blend,solve_rate,regret_based,learning_potential}" in text
    groups = cli.knob_groups(spade.Config)
    assert sum(len(knobs) for _, knobs in groups) == len(dataclasses.fields(spade.Config))
    assert [h for h in re.findall(r"^(\S.*):$", raw, re.M) if h != "options"] == [title for title, _ in groups]
    readme = re.findall(r"^\| ([^|`]+?) \| (`--.+`) \|$", (ROOT / "README.md").read_text(), re.M)
    assert readme == [(title, ", ".join(f"`{cli.flag(k)}`" for k, _ in knobs)) for title, knobs in groups]


def test_the_config_verb_shows_every_value_under_the_layer_that_set_it(capsys):
    import spade
    spade.main(["config", "--setting", "tool_use", "--model", "Qwen3-8B", "--steps", "7"])
    layers, layer = {}, None
    for line in capsys.readouterr().out.splitlines()[1:]:
        if not line.startswith("    "):
            layer, line = line.strip().split(": ", 1)
        layers.setdefault(layer, []).extend(line.split())
    assert list(layers) == ["default", "setting", "model", "command line"]   # each over those before it
    assert {"regen_interval=8", "hint_max_tokens=2048"} <= set(layers["setting"])
    assert {"thinking=on", "kl_coef=0.005", "designer_max_tokens=20000"} <= set(layers["model"])  # over tool use's KL
    assert {"steps=7", "model=Qwen3-8B"} <= set(layers["command line"]) and "top_p=0.95" in layers["default"]
    assert not any(cell.startswith(("resume=", "no_memory=", "pool=")) for cells in layers.values() for cell in cells)
    cfg = spade.configure({"model": "tiny", "lr": 1e-3}, saved={"model": "tiny", "steps": 2, "lr": 1e-3})
    assert (cfg.source["steps"], cfg.source["lr"], cfg.source["max_turns"]) == ("saved run", "command line", "embedded")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (make test-vllm)")
def test_self_play_with_the_vllm_engine(tmp_path):
    # The trainer and a separate vLLM engine: every step's new weights must be pushed into vLLM.
    result = spade(*FAST, "--engine", "vllm", "--out", str(tmp_path / "vllm"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = assert_trained(tmp_path / "vllm", 2)
    assert all(m["sync/logprob_gap"] <= 1e-5 for m in metrics)   # fp32 on both sides: the push is whole


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (make test-vllm)")
@pytest.mark.parametrize("tp", [1, 2])
def test_two_ranks_train_with_vllm_in_tensor_parallel_groups(tp, tmp_path):
    # --tp 2: one vLLM engine over both ranks, which still play their own shares (launch.TensorParallelGroup);
    # --tp 1: two engines, one a rank (vLLM's external data parallelism).
    # vLLM's CPU build names a TP group's shared memory without a run of its own in the name under torchrun's
    # env:// ("-tp:0-[0-1]-cpushm_<rank>" in /dev/shm) and leaves it behind when the ranks end: a second run
    # on the machine would fail to create it (EEXIST). The test removes its own, before and after.
    stale = lambda: [p.unlink(missing_ok=True) for p in Path("/dev/shm").glob("*-tp:*-cpushm_*")]
    stale()
    try:
        run_two_ranks_with_vllm(tp, tmp_path)
    finally:
        stale()


def run_two_ranks_with_vllm(tp, tmp_path):
    launcher = launch([*FAST, "--engine", "vllm", "--tp", str(tp), "--out", str(tmp_path / "vllm")])
    output = launcher.communicate(timeout=500)[0]
    assert launcher.returncode == 0, output[-5000:]
    assert f"tensor_parallel_size={tp}" in output and f"engine=vllm tp={tp}" in output
    assert_trained(tmp_path / "vllm", 2)


@pytest.mark.parametrize("flag, package", [("--wandb", "wandb"), ("--engine=vllm", "vllm")])
def test_a_flag_whose_package_is_missing_fails_with_one_sentence(flag, package):
    from spade import parse_config
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(SystemExit, match=f"^spade.py: {flag.split('=')[0]} .*needs"):
        parse_config(["--model", "tiny", flag])


def test_thirty_knobs_each_with_a_real_default():
    import spade
    knobs = dataclasses.fields(spade.Config)
    assert len(knobs) <= 30
    assert all(f.default not in (-1, "auto") or f.name == "engine" for f in knobs)   # no sentinel to resolve
    assert not {f.name for f in knobs} & {f.name for f in dataclasses.fields(spade.Unflagged)}


def test_the_seed_changes_the_instances_played(monkeypatch):
    # The reset seeds of a step's plays come from the environment, the step and --seed: two runs that
    # differ only in --seed play other instances; one --seed replays the same ones.
    import types
    import agent
    import spade
    from envs import Environment
    monkeypatch.setattr(agent, "play", lambda envs, *a, seeds, **k: [
        types.SimpleNamespace(env_id=e.env_id, seed=s[0], num_generated_tokens=1) for e, s in zip(envs, seeds)])

    def seeds(seed, step=3):
        run = types.SimpleNamespace(cfg=spade.parse_config(["--model", "tiny", "--seed", str(seed)]), rank=0, world=1,
                                    state=dict(lengths={}), gen=types.SimpleNamespace(independent=contextlib.nullcontext),
                                    tokenizer=None, params=dict(agent=None))
        return [p.seed for p in spade.play_on_ranks(run, [Environment("game", "Optimization", "")], 4, step)]

    assert seeds(0) == seeds(0) and len(set(seeds(0))) == 4
    assert seeds(1) != seeds(0) and seeds(0, step=4) != seeds(0)


@pytest.mark.parametrize("save_every, steps, saved", [(0, 3, []), (5, 3, [3]), (1, 3, [1, 2, 3])])
def test_save_every_zero_writes_no_checkpoint_and_at_least_steps_only_the_last(save_every, steps, saved, monkeypatch):
    import threading
    import types
    import spade
    written = []
    monkeypatch.setattr(spade, "save_checkpoint", lambda run_dir, cfg, model, tok, opt, memory, state, rank:
                        written.append(state["step"]))
    cfg = spade.parse_config(["--model", "tiny", "--steps", str(steps), "--save-every", str(save_every)])
    log = types.SimpleNamespace(step=lambda metrics: None, plays=lambda *a: None, print=print)
    run = types.SimpleNamespace(cfg=cfg, state=dict(step=0), log=log, stop=threading.Event(), world=1, dir=None,
                                model=None, tokenizer=None, optimizer=None, memory=None, rank=0)
    for step in range(steps):
        assert spade.log_and_save(run, step, [], [], {})
    assert written == saved


def test_the_embedded_preset_fits_either_setting():
    # The small models get the embedded preset, two skills of the setting among its values; the games'
    # seed pool is the easy one (envs/easy/), tool use keeps envs/.
    from spade import parse_config
    games, tools = parse_config(["--model", "tiny"]), parse_config(["--model", "TINY-moe", "--setting", "tool_use"])
    assert (games.steps, games.skills, games.unflagged.seed_pool) == (12, "Mathematical Reasoning,Pattern Recognition",
                                                                       "envs/easy/")
    assert (tools.steps, tools.skills, tools.unflagged.skills_per_regen) == (12, "Data Retrieval,State Modification", 2)
    assert tools.unflagged.seed_pool == "" and parse_config(["--model", "Qwen3-4B"]).unflagged.seed_pool == ""
    assert parse_config(["--model", "random-qwen3-1.7b:2"]).unflagged.designer_max_tokens == 256


@pytest.mark.parametrize("setting", ["games", "tool_use"])
def test_a_plain_run_gives_each_skill_of_an_epoch_two_designer_slots(setting):
    # Designer advantages are centred per skill (METHOD 6.2): with one slot a skill every advantage would
    # be 0 whatever the model writes. A plain run's epochs give each of their skills at least two slots,
    # so two valid environments of a skill that score differently train the designer.
    from collections import Counter
    import designer
    import regret
    from spade import parse_config
    cfg = parse_config(["--setting", setting])
    for epoch in range(cfg.steps // cfg.regen_interval):
        slots = designer.slots_for_epoch(cfg.skill_list(), epoch, cfg.unflagged.skills_per_regen, cfg.num_envs)
        assert min(Counter(slots).values()) >= 2, slots
        skill = slots[0]
        advantages = regret.designer_advantages([0.6, 0.2], [skill, skill], scale=1.0)
        assert advantages[0] > 0 > advantages[1]


def test_paper_columns_parse_and_derive():
    # METHOD 7.3's columns from --setting and --model; what the command line gives always wins.
    from spade import parse_config
    tool_4b = parse_config(["--setting", "tool_use", "--model", "Qwen3-4B"])
    assert (tool_4b.steps, tool_4b.regen_interval, tool_4b.num_envs, tool_4b.plays_per_env, tool_4b.designer_reward,
            tool_4b.kl_coef) == (500, 32, 16, 16, "regret_based", 0.005)
    assert (tool_4b.unflagged.skills_per_regen, tool_4b.unflagged.hint_plays, tool_4b.unflagged.hint_max_tokens,
            tool_4b.unflagged.designer_max_tokens) == (6, 4, 512, 16384)
    tool_30b = parse_config(["--setting", "tool_use", "--model", "Qwen3-30B-A3B"])
    assert (tool_30b.unflagged.hint_max_tokens, tool_30b.kl_coef, tool_30b.regen_interval) == (2048, 0.005, 8)
    games_8b = parse_config(["--model", "Qwen3-8B"])
    assert (games_8b.unflagged.designer_max_tokens, games_8b.kl_coef,
            games_8b.unflagged.hint_max_tokens) == (20000, 0.005, 4096)
    two_skill = parse_config(["--model", "Qwen3-30B-A3B", "--skills", "Mathematical Reasoning,Pattern Recognition"])
    assert (two_skill.unflagged.skills_per_regen, two_skill.kl_coef) == (2, 0.0)
    assert two_skill.plateau() == dict(lo=0.4, hi=0.6, ramp=0.25)
    # METHOD 7.3: the 8B agent thinks (games and tool use); the instruct models do not.
    assert (games_8b.thinking, tool_30b.thinking, two_skill.thinking) == ("on", "off", "off")
    assert parse_config(["--model", "Qwen3-8B", "--thinking", "off"]).thinking == "off"
    # The hub id an alias stands for, and a directory named after either, find the same row.
    for name in ("Qwen/Qwen3-8B", "/ckpt/Qwen3-8B"):
        cfg = parse_config(["--model", name])
        assert (cfg.thinking, cfg.kl_coef, cfg.unflagged) == (games_8b.thinking, games_8b.kl_coef, games_8b.unflagged)
    tool_4b_dir = parse_config(["--setting", "tool_use", "--model", "/ckpt/Qwen3-4B-Instruct-2507"])
    assert tool_4b_dir.unflagged.hint_max_tokens == 512
    assert parse_config(["--model", "random-runs/ckpt"]).steps != parse_config(["--model", "random-qwen3-8b"]).steps
    # The fixed-RLVE baseline: 16 plays per problem at temperature 1 unless given (METHOD 10).
    rlve_30b = parse_config(["--rlve", "--model", "Qwen3-30B-A3B"])
    assert (rlve_30b.plays_per_env, rlve_30b.temperature, rlve_30b.num_envs, rlve_30b.kl_coef) == (16, 1.0, 24, 0.0)
    assert parse_config(["--rlve", "--model", "Qwen3-30B-A3B", "--plays-per-env", "8"]).plays_per_env == 8
    assert parse_config(["--rlve", "--model", "tiny"]).plays_per_env == 16           # the embedded preset's
    given = parse_config(["--setting", "tool_use", "--model", "Qwen3-8B", "--kl-coef", "0", "--regen-interval", "5",
                          "--plateau-band", "0.2,0.4,0.2"])
    assert (given.kl_coef, given.regen_interval, given.unflagged.designer_max_tokens) == (0.0, 5, 20000)
    assert given.plateau() == dict(lo=0.2, hi=0.4, ramp=0.2)


def launch(args, world=2):
    """spade.py started as `python spade.py` on a node with `world` GPUs would start it (launch.launch_ranks),
    in a process group of its own as a terminal's job; gloo ranks on CPU."""
    code = "import sys; from backend import launch; sys.exit(launch.launch_ranks(sys.argv[2:], int(sys.argv[1]), 'spade.py'))"
    return subprocess.Popen([sys.executable, "-c", code, str(world), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def rank_pid(launcher_pid, rank):
    """The process id of one rank, read off the environment of the launcher's children."""
    for pid in subprocess.check_output(["ps", "--ppid", str(launcher_pid), "-o", "pid="], text=True).split():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no rank {rank} among the launcher's children")


def test_two_ranks_train_the_whole_batch_with_a_kl_reference(tmp_path):
    # Every rank holds the whole step's plays (gathered) and hands the whole batch to grpo.update, which
    # splits it between the ranks itself; the KL reference is loaded sharded like the policy (models.load_sharded), so its KL
    # to the untrained policy is 0.
    # One step, a regen step and the last: the epoch it opens is flushed then (METHOD 6.2 step 5), so the
    # saved state has no open epoch.
    launcher = launch([*FAST, "--steps", "1", "--kl-coef", "0.005", "--out", str(tmp_path / "ranks")])
    output = launcher.communicate(timeout=300)[0]
    assert launcher.returncode == 0, output[-5000:]
    run_dir = tmp_path / "ranks"
    [step0] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert step0["grpo/num_samples"] == step0["agent/samples"] + step0.get("designer/samples", 0) > 0
    assert step0["grpo/kl"] == pytest.approx(0.0, abs=1e-6)    # the policy is still the initial model
    latest = json.loads((run_dir / "latest").read_text())
    assert torch.load(run_dir / latest["checkpoint"] / "state.pt", weights_only=False)["state"]["epoch"] is None
    # One step more: rank 0 alone reads the saved model, each rank its own optimizer shards, and the KL
    # reference is the initial model again (loaded from --model), so the trained policy's KL is not 0.
    launcher = launch(["--resume", str(run_dir), "--steps", "2"])
    output = launcher.communicate(timeout=300)[0]
    assert launcher.returncode == 0 and f"resumed {run_dir} at step 1" in output, output[-5000:]
    assert output.count("extending a finished run: its last step scored the open epoch early") == 1   # rank 0's
    step1 = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert step1["step"] == 1 and step1["grpo/kl"] > 0


def test_a_ctrl_c_that_reaches_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    # Ranks get a terminal's Ctrl-C at slightly different moments; here only rank 1 gets it at all. If each
    # rank decided alone, rank 1 would save and leave while rank 0 waited for it in the next step's
    # collectives (the launcher would then kill it: a non-zero exit). They decide together (launch.agreed).
    args = [*FAST, "--pool", str(ROOT / "envs"), "--steps", "50", "--save-every", "100", "--out", str(tmp_path / "c")]
    launcher = launch(args)
    metrics, deadline = tmp_path / "c" / "metrics.jsonl", time.time() + 240
    while time.time() < deadline and not metrics.exists():
        time.sleep(0.2)
    os.kill(rank_pid(launcher.pid, 1), signal.SIGINT)
    output, _ = launcher.communicate(timeout=240)
    assert launcher.returncode == 0, output[-5000:]
    saved = json.loads((tmp_path / "c" / "latest").read_text())["step"]
    assert 1 <= saved < 50 and f"interrupted: saved step {saved}" in output


# --- ranks divide the plays ------------------------------------------------------------------------
def comparable(metrics):
    """A step's metrics without what the clock decides."""
    return {k: v for k, v in metrics.items()
            if not (k.startswith("time/") or k.endswith("seconds") or k in ("tokens_per_s", "grpo/num_micro_batches"))}


@pytest.mark.parametrize("baseline", [[], ["--rlve", "--num-envs", "3"]], ids=["self-play", "rlve"])
def test_two_ranks_play_what_one_process_plays_and_update_the_same(baseline, tmp_path):
    """Each play's seed fixes its environment, and greedy sampling its tokens: 2 gloo ranks dividing the
    plays and the designer's slots (or RLVE's problems) between them give one process's episodes,
    metrics, weights (the update within float tolerance) and printed rejections. Hints are left out
    (learning_potential): they are sampled at their own temperature, 0.3, from each rank's stream."""
    args = [*FAST, "--temperature", "1e-3", "--designer-reward", "learning_potential", "--steps", "2", *baseline]
    single = spade(*args, "--out", str(tmp_path / "one"))
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    launcher = launch([*args, "--out", str(tmp_path / "two")])
    output = launcher.communicate(timeout=400)[0]
    assert launcher.returncode == 0, output[-5000:]
    one, two = ([json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
                for run in ("one", "two"))
    assert len(one) == len(two) == 2
    for a, b in zip(one, two):
        assert comparable(a).keys() == comparable(b).keys()
        for key, value in comparable(a).items():
            assert b[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    rejections = lambda text: [line for line in text.splitlines() if " rejected at " in line]
    assert rejections(output) == rejections(single.stdout) and (baseline or rejections(output))
    plays = [json.loads((tmp_path / run / "samples" / "step_00000" / "plays.json").read_text()) for run in ("one", "two")]
    assert plays[0] == plays[1]
    weights = [final_weights(tmp_path / run)[0] for run in ("one", "two")]
    for name, tensor in weights[0].items():
        assert torch.allclose(tensor.float(), weights[1][name].float(), atol=1e-5), name


CLOCK = """
import time
class ClockEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns, self.turn = max_turns, 0
    def reset(self, seed=None):
        self.turn = 0
        return f"It is {time.time_ns()} ns.", {}
    def step(self, action):
        self.turn += 1
        return f"Now it is {time.time_ns()} ns.", 1.0, self.turn >= 3, False, {}
"""


def clock_worker(rank, world, port, out, alone):
    """One gloo rank playing two clock environments through spade.play_on_ranks with a scripted engine."""
    import torch.distributed as dist
    from types import SimpleNamespace
    import spade
    from backend import engine, launch, models
    from envs import Environment
    from test_agent import ScriptedEngine
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")

    class Scripted(ScriptedEngine):   # TEST DOUBLE: answers every turn "\boxed{tick}", as its own engine
        @contextlib.contextmanager
        def independent(self):
            yield alone

    tokenizer = models.load_model("tiny")[1]
    gen = launch.RankAgreement(Scripted(tokenizer, lambda prompt: "\\boxed{tick}"))
    cfg = SimpleNamespace(max_turns=5, max_context=4096, max_new_tokens=16, thinking="off", seed=0)
    run = SimpleNamespace(gen=gen, tokenizer=tokenizer, rank=rank, world=world, state={"lengths": {}}, cfg=cfg,
                          params={"agent": engine.SamplingParams(max_new_tokens=16)})
    envs = [Environment(f"clock_{i}", "Logical Deduction", CLOCK) for i in range(2)]
    try:
        played = spade.play_on_ranks(run, envs, 2, step=0)
        result = [[e.env_id, e.status, e.reward, e.num_turns, e.messages] for e in played]
    except RuntimeError as e:
        result = str(e)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


@pytest.mark.parametrize("alone", [True, False], ids=["divided", "lockstep"])
def test_an_environment_that_reads_the_clock_plays_to_the_end_on_two_ranks(alone, tmp_path):
    """Every play runs once on the node, so observations that hold the clock differ between ranks
    harmlessly; only ranks that play every rollout in lockstep must agree, and stop when they do not."""
    import torch.multiprocessing as mp
    from backend.launch import free_port
    mp.spawn(clock_worker, args=(2, free_port(), str(tmp_path), alone), nprocs=2)
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    if alone:
        assert results[0] == results[1] and len(results[0]) == 4
        assert all(status == "terminated" and reward == 1.0 and turns == 3 for _, status, reward, turns, _ in results[0])
        assert [r[0] for r in results[0]] == ["clock_0", "clock_0", "clock_1", "clock_1"]   # environment-major
    else:
        assert all("different prompts" in result for result in results)


STATIC = """
class StaticEnv:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
    def reset(self, seed=None):
        return "Say anything.", {}
    def step(self, action):
        return "", 0.0, True, False, {}
"""


def noise_worker(rank, world, port, out):
    """One gloo rank sampling at temperature 1 its share of two plays of an environment whose first
    observation is the same for every seed, with the tiny model."""
    import torch.distributed as dist
    from types import SimpleNamespace
    import spade
    from backend import engine, launch, models
    from envs import Environment
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    model, tokenizer = models.load_model("tiny")
    cfg = SimpleNamespace(max_turns=1, max_context=1024, max_new_tokens=12, thinking="off", seed=0)
    run = SimpleNamespace(gen=launch.RankAgreement(engine.make_engine(model, tokenizer, "hf")), tokenizer=tokenizer,
                          rank=rank, world=world, state={"lengths": {}}, cfg=cfg, params={"agent": engine.SamplingParams(
                              temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=12)})
    torch.manual_seed(0)                                   # as set_up seeds every rank: the same state
    played = spade.play_on_ranks(run, [Environment("static", "Logical Deduction", STATIC)], 2, step=0)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps([e.tokens for e in played]))
    dist.destroy_process_group()


def test_ranks_that_divide_the_plays_sample_with_noise_of_their_own(tmp_path):
    # Rank 0 plays the first play and rank 1 the second, from the same prompt: were their generators in
    # the same state, the two replies would be the same tokens.
    import torch.multiprocessing as mp
    from backend.launch import free_port
    mp.spawn(noise_worker, args=(2, free_port(), str(tmp_path)), nprocs=2)
    first, second = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1))
    assert first == second and len(first) == 2 and first[0] != first[1]


def test_rank_bench_runs_at_a_tiny_size(capsys):
    from bench import rank_bench
    rows = rank_bench.main(["--envs", "2", "--plays", "2", "--max-turns", "1", "--max-new-tokens", "4", "--slots", "2",
                            "--repeat", "1"])
    assert set(rows) == {"play", "design"} and all(row["ratio"] > 0 and row["bound"] > 0 for row in rows.values())
    assert "apart / 1" in capsys.readouterr().out
