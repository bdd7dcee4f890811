"""The memory plan (harness/plan.py): the engine sized to the run, the run refused in one sentence where
nothing fits, and the plan's arithmetic against the models it sizes. bench/memory_bench.py checks its
bytes against the real update, simulated."""
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import spade
from backend import engine, models
from harness import plan, setup

ROOT = Path(__file__).resolve().parent.parent
H100 = int(79.2 * plan.GiB)   # what torch reports for an 80 GB card


def gpu_of(monkeypatch, total_bytes):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=0: types.SimpleNamespace(
        total_memory=total_bytes, name="a test double of an 80 GB GPU"))


def shaped(monkeypatch, name, **changes):
    """--model `name` read as the config of its real shape (models.RANDOM_SHAPES), changed by `changes`."""
    config = models.random_config(f"random-{name.lower()}", models.tiny_tokenizer())
    for key, value in changes.items():
        setattr(config, key, value)
    monkeypatch.setattr(models, "model_config", lambda model: config)
    return config


def test_vllm_is_sized_to_the_run_not_to_the_models_context(monkeypatch):
    """Qwen3-4B's config allows 262,144 tokens: a KV cache for that does not fit beside the trainer on
    an 80 GB card, so the engine gets the longest sequence the run generates from, and a share of the
    card that holds the trainer's bytes beside it."""
    config = shaped(monkeypatch, "Qwen3-4B", max_position_embeddings=262144)
    gpu_of(monkeypatch, H100)
    monkeypatch.setattr(setup, "engine_kind", lambda cfg, device: "vllm")   # as where vLLM is installed
    cfg = spade.configure(dict(model="Qwen3-4B", setting="tool_use"))
    chosen = setup.memory_plan(cfg, spade.SETTINGS["tool_use"], gpus=1)
    assert chosen.problem is None
    # the audit's: a designer's 16,384 tokens of code read, 4,096 of prompt, a verdict of up to 16,384
    assert chosen.max_model_len == 16384 + 4096 + 16384 > cfg.max_context
    assert chosen.kv_tokens >= chosen.max_model_len
    assert chosen.kv_tokens < config.max_position_embeddings         # what vLLM would have planned for
    assert chosen.vllm_share * H100 + chosen.trainer_kept <= H100 - plan.RESERVED
    # COLUMNS' tool-use Qwen3-4B: 16 environments of 16 plays on one engine
    assert chosen.max_num_seqs == 256


def test_the_context_covers_every_generate_call_of_the_run():
    """A designer's prompt (its document) and an audit that reads the code can be longer than a play."""
    short = plan.Knobs(max_context=4096, corpus_max_words=6000, designer_max_tokens=16384)
    assert plan.context_length(short) == 256 * -(-(2 * 6000 + 4096 + 16384) // 256)
    audited = plan.Knobs(max_context=4096, corpus_max_words=100, designer_max_tokens=20000, hint_max_tokens=512,
                         audit=True)
    assert plan.context_length(audited) == 256 * -(-(20000 + 4096 + 16384) // 256)


def test_a_model_that_does_not_fit_is_refused_in_one_sentence_naming_what_fits(monkeypatch):
    """Qwen3-8B with its KL reference on one 80 GB card (its row of METHOD 7.3): no option fits the update,
    and the sentence names the smallest change that does, before anything loads."""
    shaped(monkeypatch, "Qwen3-8B")
    gpu_of(monkeypatch, H100)
    cfg = spade.configure(dict(model="Qwen3-8B"))
    assert cfg.kl_coef > 0
    with pytest.raises(SystemExit) as refused:
        setup.memory_plan(cfg, spade.SETTINGS["games"], gpus=1)
    sentence = str(refused.value)
    assert sentence.startswith("spade.py: Qwen3-8B does not fit on 1 GPU of 79.2 GiB: the update needs")
    assert "it fits on 2 GPUs" in sentence and "\n" not in sentence
    chosen = setup.memory_plan(cfg, spade.SETTINGS["games"], gpus=2)
    assert chosen.problem is None and chosen.tp == 1


def test_the_plan_prefers_the_official_numerics_and_gives_them_up_only_where_they_do_not_fit():
    """fp32 moments where they fit, the KL reference moved to host memory before the moments are shrunk
    to 8 bits, and 8-bit moments where nothing else leaves vLLM a context (Qwen3-30B-A3B on 8 GPUs)."""
    shape = lambda name: models.random_config(name, models.tiny_tokenizer())
    chosen = lambda name, gpus, gib, kl: plan.plan(shape(name), gpus, int(gib * plan.GiB), plan.Knobs(kl_coef=kl))
    assert [(p.moments, p.kl_on_cpu) for p in (chosen("random-qwen3-8b", 8, 79.2, 0.005),
                                               chosen("random-qwen3-4b", 2, 50, 0.005),
                                               chosen("random-qwen3-4b", 2, 46, 0.005))] == \
        [("fp32", False), ("fp32", True), ("8bit", False)]
    moe = chosen("random-qwen3-30b-a3b", 8, 79.2, 0.0)
    assert (moe.moments, moe.tp, moe.problem, moe.kl) == ("8bit", 4, None, False)
    assert plan.option(shape("random-qwen3-30b-a3b"), 8, H100, plan.Knobs(), "fp32", False).problem
    assert "KL reference none" in moe.summary()


@pytest.mark.parametrize("name", ["tiny", "tiny-moe", "random-qwen3-4b:2", "random-qwen3-30b-a3b:1"])
def test_the_plans_parameter_count_is_the_models(name):
    config = models.model_config(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total, layer, root = plan.shapes(config)
    assert total == sum(p.numel() for p in model.parameters())
    assert layer == sum(p.numel() for p in model.model.layers[0].parameters())
    assert total == root + config.num_hidden_layers * layer


def test_the_trainer_gives_the_engine_the_plans_sizes_and_takes_its_moments(monkeypatch):
    """load_trainer hands vLLM the plan's max_model_len, max_num_seqs and memory share (a test double
    stands for vLLM, which this CPU build lacks), and steps the optimizer the plan chose."""
    seen = {}

    def make_engine(model, tokenizer, kind, **kwargs):   # a test double of engine.make_engine
        seen.update(kwargs, kind=kind)
        return engine.HFEngine(model, tokenizer)
    monkeypatch.setattr(engine, "make_engine", make_engine)
    monkeypatch.setattr(setup, "engine_kind", lambda cfg, device: "vllm")   # as where vLLM is installed
    cfg = spade.configure(dict(model="tiny"))
    chosen = plan.plan(models.model_config("tiny"), 1, H100, plan.Knobs(max_context=3072, engine="vllm"))
    *_, optimizer, _ = setup.load_trainer(cfg, None, "cpu", 1, chosen=chosen)
    assert seen == dict(kind="vllm", tp=1, seed=cfg.seed, max_model_len=chosen.max_model_len,
                        max_num_seqs=chosen.max_num_seqs, gpu_memory_utilization=chosen.vllm_share)
    assert optimizer is not None


def test_the_memory_bench_runs_at_a_tiny_size():
    """bench/memory_bench.py end to end on `tiny` over 2 fake ranks (seconds): its table, within 2x. Its own
    process: Triton's CPU interpreter (which these tests turn on) would run the kernels on fake tensors,
    where a GPU run's simulation only traces them."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "memory_bench.py"), "--models", "tiny", "--gpus", "2",
                             "--max-context", "1024"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    table = [[cell.strip() for cell in line.split("|")[1:-1]] for line in result.stdout.splitlines()
             if line.startswith("| tiny ")]
    assert [row[2] for row in table] == ["update", "rollout (trainer)", "resume", "checkpoint", "rollout",
                                         "first step's compile"]
    assert all(0.5 < float(row[5]) < 2 for row in table[:4]), result.stdout


class SleepyEngine:
    """A test double of vLLM's side of the engine protocol around the in-process engine: it records its
    sleeps, weight loads, wake-ups and generate calls (a run of them as one), and refuses to generate
    while asleep."""
    model = None   # a copy of its own: push_weights loads the weights into it

    def __init__(self, model, tokenizer, events):
        self.inner, self.events, self.asleep = engine.HFEngine(model, tokenizer), events, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def sleep(self):
        self.asleep = True
        self.events.append("sleep")

    def load_weights(self, named_tensors):
        assert self.asleep and sum(1 for _ in named_tensors)
        self.events.append("load_weights")

    def wake_up(self):
        self.asleep = False
        self.events.append("wake_up")

    def generate(self, prompts, params):
        assert not self.asleep, "generate while asleep"
        if self.events[-1:] != ["generate"]:
            self.events.append("generate")
        return self.inner.generate(prompts, params)


def test_resume_and_checkpoint_happen_while_the_engine_sleeps(tmp_path, monkeypatch):
    """The plan's resume and checkpoint phases have no vLLM beside them: the optimizer's state is made and
    read, and every checkpoint gathered, between a sleep and the next weight push."""
    from harness import checkpoint
    events = []
    monkeypatch.setattr(engine, "make_engine", lambda model, tokenizer, kind, **kw: SleepyEngine(model, tokenizer,
                                                                                                   events))
    for module, name in ((setup, "restore"), (spade, "save_checkpoint")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **kw: (
            events.append(_name), _real(*a, **kw))[1])
    out = str(tmp_path / "run")
    fast = ["--model", "tiny", "--pool", str(ROOT / "envs"), "--num-envs", "1", "--plays-per-env", "2",
            "--max-new-tokens", "8", "--max-turns", "2", "--save-every", "1"]
    for argv in ([*fast, "--steps", "1", "--out", out], ["--resume", out, "--steps", "2"]):
        cfg = spade.parse_config(argv)
        spade.train(setup.set_up(cfg, spade.SETTINGS[cfg.setting]))
        checkpoint._LOCKS.pop().close()   # the run's claim, held for a process's life: the next run is another
    step = ["load_weights", "wake_up", "generate", "sleep", "save_checkpoint"]
    assert events == ["sleep", *step, "sleep", "restore", *step], events


@pytest.mark.parametrize("name", ["Qwen3-4B", "Qwen3-8B", "Qwen3-30B-A3B"])
def test_the_shipped_configs_are_the_shapes_the_bench_simulates(name):
    """The paper's models' config.json (backend/configs/) read offline, of the shapes memory_bench.py runs."""
    assert plan.shapes(models.model_config(name)) == plan.shapes(models.model_config(f"random-{name.lower()}"))


def test_the_plan_on_demand_without_a_gpu(capsys):
    """`spade.py plan` before renting a node: from the shipped configs, without a GPU or weights."""
    spade.main(["plan", "--model", "Qwen3-30B-A3B", "--gpus", "8", "--gpu-gib", "80"])
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("Qwen3-30B-A3B on 8 GPUs of 80.0 GiB fits: ") and "vLLM tp " in table[0]
    phases = {line[:24].strip(): float(line[24:36]) for line in table[2:]}
    assert {"rollout", "update", "resume", "checkpoint", "first step's compile", "reserved"} <= set(phases)
    assert max(phases.values()) + phases["reserved"] <= 80
    with pytest.raises(SystemExit) as refused:   # METHOD 7.3's Qwen3-8B row (its KL reference) on one card
        spade.main(["plan", "--model", "Qwen3-8B", "--gpu-gib", "80"])
    sentence = str(refused.value)
    assert "does not fit on 1 GPU of 80.0 GiB" in sentence and sentence.endswith("it fits on 2 GPUs")
    for gpus in (["--gpus", "2"], ["--gpus", "4", "--node-gpus", "2"]):   # more than a node, or a split node
        with pytest.raises(SystemExit, match=r"^spade.py: --tp 4 does not divide the 2 GPUs of a node into "):
            spade.main(["plan", "--model", "Qwen3-8B", *gpus, "--tp", "4", "--gpu-gib", "139"])
    with pytest.raises(SystemExit) as unknown:
        spade.main(["plan", "--model", "Qwen3-9B", "--gpus", "8"])
    assert str(unknown.value).startswith("spade.py: unknown model 'Qwen3-9B'") and "\n" not in str(unknown.value)


def test_the_gpu_check_fits_ten_minutes_and_refuses_a_driver_older_than_cuda_13(tmp_path):
    """bench/gpu_check.sh's own arithmetic: its steps' budgets (printed) sum under 600 s; and before any
    step, a driver older than 580 (what CUDA 13 needs) is one sentence."""
    script = str(ROOT / "bench" / "gpu_check.sh")
    budget = subprocess.run(["bash", script, "--budget"], capture_output=True, text=True, timeout=30)
    assert budget.returncode == 0, budget.stderr
    steps, total = budget.stdout.strip().removeprefix("budget: ").removesuffix("s of 600s").split(" = ")
    seconds = {name: int(value.removesuffix("s")) for name, value in (part.split() for part in steps.split(" + "))}
    assert sum(seconds.values()) == int(total) <= 600
    assert {"driver", "kernel_tests", "vllm_cycle", "memory_plan"} <= set(seconds)
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 550.54.15\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    old = subprocess.run(["bash", script], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")})
    assert old.returncode == 1 and old.stdout.splitlines()[-1] == (
        "gpu_check.sh: NVIDIA driver 550.54.15; torch 2.14.0+cu130 and vLLM 0.33 need CUDA 13, which needs driver "
        "580 or newer")


@pytest.mark.parametrize("given", [["--gpu-gib", "nan"], ["--gpu-gib", "inf"], ["--gpu-gib", "1e300"],
                                   ["--node-gpus", "0"], ["--node-gpus", "-1"]])
def test_a_plan_of_gpus_that_cannot_be_is_one_sentence(given):
    """`spade.py plan` of a GPU size that is no number of bytes (nan, inf, beyond a float's range once in
    bytes) or of nodes of no GPUs is the one sentence of its flags, not a ValueError, OverflowError or
    IndexError from the arithmetic (--node-gpus 0 is no node, not "all of them")."""
    with pytest.raises(SystemExit, match=r"^spade.py plan: --gpus must be positive, --node-gpus divide it"):
        spade.main(["plan", "--model", "Qwen3-8B", *given])
