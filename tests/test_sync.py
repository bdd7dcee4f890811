"""harness/sync.py: the engine and the trainer score a fixed probe before every step; a run whose engine
does not hold the trainer's weights stops before it plays. Faults as colocated trainers meet them: a
push that misses one tensor after a sleep discarded the weights, a layer pushed as zeros, a rotary
buffer left stale by a wake-up. The HF engine shares the trainer's model, so for the faults it runs on
a copy, which a push must fill through `load_weights` as it fills vLLM."""
import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import grpo
import spade
from envs import load_pool
from backend import engine, models
from harness import sync

ROOT = Path(__file__).resolve().parents[1]
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
SKIPPED = "model.layers.0.self_attn.o_proj.weight"   # the tensor a faulty push misses
ZEROED = "model.layers.1."                            # the layer a faulty push sends as zeros


@pytest.fixture(scope="module")
def tiny():
    return models.load_model("tiny", device="cpu")


@pytest.fixture(scope="module")
def probe(tiny):
    setting = spade.SETTINGS["games"]
    skills = list(setting.skills)
    return sync.probe_sequences(tiny[1], setting, skills, load_pool(ROOT / setting.seeds, validate=False))


def faulty_push(gen, model, fault):
    """Push `model` into `gen` as a faulty trainer would: "skip" (a sleep discarded the weights, then one
    tensor is not pushed), "zero" (a layer's weights pushed as zeros) or "stale" (a correct push, then a
    wake-up that lost the rotary buffer)."""
    named = [(n, p.detach().clone()) for n, p in model.named_parameters()]
    if fault == "skip":
        gen.load_weights([(n, torch.zeros_like(p)) for n, p in named])
        named = [(n, p) for n, p in named if n != SKIPPED]
    if fault == "zero":
        named = [(n, torch.zeros_like(p) if n.startswith(ZEROED) else p) for n, p in named]
    gen.load_weights(named)
    if fault == "stale":
        stale_rotary(gen)


def stale_rotary(gen):
    """The engine's rotary table zeroed: HFEngine's inv_freq, vLLM's cos_sin_cache (in its worker)."""
    if isinstance(gen, engine.HFEngine):
        gen.model.model.rotary_emb.inv_freq.zero_()
        return

    def zero_cache(worker):
        for module in worker.model_runner.model.modules():
            if hasattr(module, "cos_sin_cache"):
                module.cos_sin_cache.zero_()
    gen.llm.collective_rpc(zero_cache)


def fake_run(gen, model, probe):
    return SimpleNamespace(gen=gen, model=model, probe=probe, world=1, dir=Path("out/run"))


def test_the_probe_is_the_tails_of_two_prompts_of_the_run(tiny, probe):
    assert [len(s) for s in probe] == [sync.PROBE_TOKENS] * 2
    assert probe[0] != probe[1]
    no_seeds = sync.probe_sequences(tiny[1], spade.SETTINGS["tool_use"], ["Data Retrieval"], [])
    assert len(no_seeds) == 1 and len(no_seeds[0]) == sync.PROBE_TOKENS


def test_the_engines_score_is_the_teacher_forced_distribution(tiny, probe):
    model, tokenizer = tiny
    scores = engine.HFEngine(model, tokenizer).score(probe)
    with torch.no_grad():
        logits = model(torch.tensor([probe[0]])).logits[0, :-1].float()
    expected = logits.log_softmax(-1).gather(-1, torch.tensor(probe[0][1:])[:, None]).squeeze(-1)
    assert [len(s) for s in scores] == [len(s) - 1 for s in probe]
    torch.testing.assert_close(torch.tensor(scores[0]), expected, atol=1e-5, rtol=0)
    shorter = engine.HFEngine(model, tokenizer).score([probe[0][:50], probe[1]])   # right-padded, as alone
    torch.testing.assert_close(torch.tensor(shorter[0]), expected[:49], atol=1e-5, rtol=0)


def test_after_a_correct_push_the_gap_is_at_rounding_level(tiny, probe):
    # The engine sharing the trainer's model (the default HF engine) and one on a copy that a push fills,
    # after an update moved the weights: both within fp32 rounding (the bound is 5e-5).
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    shared, separate = engine.HFEngine(model, tokenizer), engine.HFEngine(copy.deepcopy(model), tokenizer)
    n = len(probe[0])
    sample = grpo.Sample(probe[0] + probe[1], [0] * n + [1] * n, [0.0] * n + [-5.0] * n, 1.0)
    grpo.update(model, grpo.make_optimizer(model, lr=1e-2), [sample])
    assert sync.logprob_gap(separate, model, probe) > 1e-2      # not pushed yet: the probe sees it
    engine.push_weights(model, separate)
    for gen in (shared, separate):
        assert sync.check(fake_run(gen, model, probe), 3)["sync/logprob_gap"] <= 1e-6


@pytest.mark.parametrize("fault", ["skip", "zero", "stale"])
def test_a_faulty_push_stops_the_run_in_one_sentence(tiny, probe, fault):
    model, tokenizer = tiny
    gen = engine.HFEngine(copy.deepcopy(model), tokenizer)
    faulty_push(gen, model, fault)
    with pytest.raises(SystemExit) as stop:
        sync.check(fake_run(gen, model, probe), 7)
    message = str(stop.value)
    assert message.startswith("spade.py: step 7: the engine (HFEngine) scores the fixed probe ") and "\n" not in message
    assert float(message.split("probe ")[1].split(" nats")[0]) > 0.3 and "last checkpoint in out/run kept" in message


def test_a_gap_that_is_not_a_number_stops_the_run(tiny, probe):
    # vLLM's CPU build answers a zeroed query projection with NaN log-probs; NaN > bound is False.
    model, tokenizer = tiny
    gen = SimpleNamespace(score=lambda sequences: [[float("nan")] * (len(s) - 1) for s in sequences])
    with pytest.raises(SystemExit, match="step 0: the engine .* scores the fixed probe nan nats per token"):
        sync.check(fake_run(gen, model, probe), 0)


def test_the_bound_follows_the_coarser_compute_dtype(tiny):
    model = tiny[0]
    assert sync.bound(model, engine.HFEngine(model, tiny[1])) == sync.BOUNDS[torch.float32]
    assert sync.bound(model, SimpleNamespace(dtype=torch.bfloat16)) == sync.BOUNDS[torch.bfloat16]
    assert sync.BOUNDS[torch.float32] < sync.BOUNDS[torch.bfloat16] < 0.38   # every fault measured is above 0.38


DRIVER = """
import copy, sys
import torch
import spade
from backend import engine
sys.path.insert(0, "tests")
from test_sync import faulty_push

fault = sys.argv[1]
make = engine.make_engine

def separate(model, tokenizer, kind="hf", **kwargs):   # the HF engine on a copy: a push has to fill it
    return make(copy.deepcopy(model) if kind == "hf" else model, tokenizer, kind, **kwargs)

pushes, correct = [], engine.push_weights

def push(model, gen):   # engine.push_weights, with a fault from the second push on (the one after step 0)
    pushes.append(1)
    if len(pushes) == 1:
        return correct(model, gen)
    faulty_push(gen, model, fault)
    gen.wake_up()

engine.make_engine, engine.push_weights = separate, push
spade.main(sys.argv[2:])
"""


def stopped_run(tmp_path, fault, *args):
    """A 2-step spade.py run whose push after step 0 has `fault`: (result, run directory)."""
    run_dir = tmp_path / fault
    result = subprocess.run([sys.executable, "-c", DRIVER, fault, "--model", "tiny", "--steps", "2", "--pool",
                             str(ROOT / "envs"), "--num-envs", "2", "--plays-per-env", "2", "--max-new-tokens", "8",
                             "--max-turns", "2", "--lr", "1e-3", "--save-every", "1", "--out", str(run_dir), *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=400)
    return result, run_dir


def assert_stopped_before_step_1(result, run_dir, name):
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stdout[-2000:] + result.stderr[-3000:]
    assert f"spade.py: step 1: the engine ({name}) scores the fixed probe " in result.stderr, result.stderr[-2000:]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0] and metrics[0]["sync/logprob_gap"] <= 1e-5   # step 0's engine was sound
    assert "step    1 |" not in result.stdout
    assert json.loads((run_dir / "latest").read_text())["step"] == 1   # step 0's checkpoint, never a later one


@pytest.mark.parametrize("fault", ["skip", "zero", "stale"])
def test_a_run_whose_push_is_faulty_stops_before_it_plays_the_next_step(tmp_path, fault):
    assert_stopped_before_step_1(*stopped_run(tmp_path, fault), "HFEngine")


@needs_vllm
def test_vllm_gaps_after_correct_and_faulty_pushes(tiny, probe):
    model, tokenizer = tiny
    gen = engine.make_engine(model, tokenizer, kind="vllm", max_model_len=512)
    assert sync.logprob_gap(gen, model, probe) <= 1e-5
    # The tied embedding changed and pushed: vLLM's CPU build packs its output layer again (or the gap is 0.5)
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.model.embed_tokens.weight.add_(0.05 * torch.randn(moved.model.embed_tokens.weight.shape,
                                                                generator=torch.Generator().manual_seed(0)))
    engine.push_weights(moved, gen)
    assert sync.logprob_gap(gen, moved, probe) <= 1e-5
    engine.push_weights(model, gen)
    for fault in ("skip", "zero", "stale"):
        faulty_push(gen, model, fault)
        with pytest.raises(SystemExit, match=r"the engine \(VLLMEngine\) scores the fixed probe"):
            sync.check(fake_run(gen, model, probe), 1)
        engine.push_weights(model, gen)   # a correct push restores it all, the rotary table aside
        if fault != "stale":
            assert sync.logprob_gap(gen, model, probe) <= 1e-5


@needs_vllm
def test_a_vllm_run_whose_push_skips_a_tensor_stops_before_it_plays_the_next_step(tmp_path):
    assert_stopped_before_step_1(*stopped_run(tmp_path, "skip", "--engine", "vllm"), "VLLMEngine")


def test_probe_bench_runs_at_a_tiny_size(capsys):
    from bench import probe_bench
    row = probe_bench.main(["--runs", "tiny"])["tiny"]
    assert row["steps"] == 1 and 0 < row["probe"] == row["first"] < row["step"] and 0 < row["share"] < 1
    assert row["gap"] <= 1e-6
    assert "| a tiny run (tests) | 1 |" in capsys.readouterr().out
