"""End to end: the real spade.py as a subprocess with the tiny model, a couple of steps each."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--model", "tiny", "--steps", "2", "--regen-interval", "2", "--num-envs", "2", "--plays-per-env", "2",
        "--hint-plays", "2", "--designer-attempts", "1", "--designer-max-tokens", "32", "--max-new-tokens", "16",
        "--hint-max-tokens", "16", "--max-turns", "2", "--corpus-max-words", "40", "--lr", "1e-3"]


def spade(*args, timeout=300, **kwargs):
    return subprocess.run([sys.executable, str(ROOT / "spade.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def final_weights(run_dir):
    from safetensors.torch import load_file
    latest = json.loads((run_dir / "latest").read_text())
    return load_file(str(run_dir / latest["checkpoint"] / "model" / "model.safetensors")), latest


def assert_trained(run_dir, steps):
    import engine
    initial, _ = engine.load_model("tiny")
    weights, latest = final_weights(run_dir)
    assert latest["step"] == steps
    changed = [name for name, p in initial.state_dict().items() if name in weights and not torch.equal(p, weights[name])]
    assert len(changed) >= len(weights) // 2, f"only {len(changed)} of {len(weights)} tensors changed"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(steps))
    assert (run_dir / "report" / "index.html").is_file() and (run_dir / "report" / "curriculum.png").is_file()
    return metrics


def test_self_play_two_steps(tmp_path):
    result = spade(*FAST, "--out", str(tmp_path), "--run", "selfplay")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "selfplay"
    metrics = assert_trained(run_dir, 2)
    assert "designer/valid_rate" in metrics[0] and "agent/reward" in metrics[0]
    memory = json.loads((run_dir / "env_memory.json").read_text())
    assert len(memory) >= 4     # seeded from envs/ (2 per skill of the preset), then the new environments
    assert "step    0 |" in result.stdout and "designer:" in result.stdout


def test_fixed_pool_baseline(tmp_path):
    result = spade(*FAST, "--pool", str(ROOT / "envs"), "--out", str(tmp_path), "--run", "pool")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = assert_trained(tmp_path / "pool", 2)
    assert "designer/valid_rate" not in metrics[0]
    assert not (tmp_path / "pool" / "env_memory.json").exists()


def test_resume_after_sigkill_keeps_memory_and_step(tmp_path):
    # One regen step (step 0) then plain steps, a checkpoint after every step; killed mid-step.
    args = [*FAST, "--steps", "4", "--regen-interval", "4", "--save-every", "1", "--out", str(tmp_path), "--run", "r"]
    run_dir = tmp_path / "r"
    process = subprocess.Popen([sys.executable, str(ROOT / "spade.py"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not (run_dir / "latest").exists():
        time.sleep(0.1)
    time.sleep(0.3)                                   # now in the middle of the next step
    process.send_signal(signal.SIGKILL)
    process.wait()
    latest = json.loads((run_dir / "latest").read_text())
    saved, saved_memory = latest["step"], json.loads((run_dir / latest["checkpoint"] / "env_memory.json").read_text())
    assert 1 <= saved < 4 and len(saved_memory) > 0
    (run_dir / "env_memory.json").write_text("[]")     # whatever the killed step left behind is not trusted
    result = spade("--resume", str(run_dir))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"resumed {run_dir} at step {saved}" in result.stdout
    assert json.loads((run_dir / "latest").read_text())["step"] == 4
    assert json.loads((run_dir / "env_memory.json").read_text()) == saved_memory   # no regen step after 0
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps[-(4 - saved):] == list(range(saved, 4))


def test_ctrl_c_saves_a_checkpoint(tmp_path):
    args = [*FAST, "--pool", str(ROOT / "envs"), "--steps", "50", "--save-every", "100", "--out", str(tmp_path), "--run", "c"]
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
    (["--num-envs", "5", "--skills-per-regen", "2"], "does not divide"),
    (["--designer-reward", "vibes"], "unknown --designer-reward"),
    (["--skills", "Juggling"], "unknown games skill"),
    (["--resume", "/nonexistent/run"], "no checkpoint to resume"),
])
def test_bad_arguments_fail_with_one_sentence(args, message, tmp_path):
    result = spade("--model", "tiny", "--out", str(tmp_path), *args, timeout=120,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode != 0
    assert message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (make test-vllm)")
def test_self_play_with_the_vllm_engine(tmp_path):
    # The trainer and a separate vLLM engine: every step's new weights must be pushed into vLLM.
    result = spade(*FAST, "--engine", "vllm", "--out", str(tmp_path), "--run", "vllm")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert_trained(tmp_path / "vllm", 2)
