"""engine.py: HFEngine's decode loop against transformers, vLLM against HFEngine (loading by name: test_models.py).

The equivalence tests compare HFEngine with a plain teacher-forced forward of the same model (the
log-probs) and with itself one prompt at a time (batching, padding, cache growth). vLLM tests skip
when vllm is not installed, sleep/wake and CUDA-graph tests when there is no GPU.
"""

import contextlib
import dataclasses
import doctest
import importlib.util
import io
import time

import huggingface_hub
import pytest
import torch

from backend import engine
from backend import models
from backend.engine import Completion, HFEngine, SamplingParams
from backend.models import load_model

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TEXTS = ["hello world", "a", "The quick brown fox jumps over the lazy dog", "x = [1, 2, 3]\nprint(x)"]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu")


@pytest.fixture(scope="module")
def prompts(tiny):
    return [tiny[1].encode(text) for text in TEXTS]


def reference_logprobs(model, prompt, completion, params):
    """Teacher-forced log-probs of `completion` after `prompt`, processed with a full sort (no top-k shortcut)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].float()
    if params.temperature == 0:
        return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
    logits = logits / params.temperature
    if params.top_k:
        kth = logits.sort(dim=-1, descending=True).values[:, params.top_k - 1 : params.top_k]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop_sorted = probs.cumsum(-1) - probs >= params.top_p
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_docstring_examples():
    assert doctest.testmod(engine).failed == 0


def test_greedy_batch_equals_one_by_one_with_early_stops(tiny, prompts):
    model, tokenizer = tiny
    greedy = SamplingParams(temperature=0, max_new_tokens=24)
    first = HFEngine(model, tokenizer).generate(prompts[:1], greedy)[0]
    # An EOS that row 0 emits at step 5, so rows stop at different times while the cache grows (in
    # chunks of 4 columns, rounded up to 16) and drops the rows that stopped; prefill takes one prompt
    # at a time (50 // 43 rows).
    engine_ = HFEngine(model, tokenizer, eos_token_ids={first.token_ids[5]}, cache_chunk=4, prefill_tokens=50)
    batch = engine_.generate(prompts, greedy)
    alone = [engine_.generate([p], greedy)[0] for p in prompts]
    assert [c.token_ids for c in batch] == [c.token_ids for c in alone]
    assert batch[0].finish_reason == "stop" and batch[0].token_ids == first.token_ids[:6]
    for b, a in zip(batch, alone):
        assert b.finish_reason == a.finish_reason
        assert max(abs(x - y) for x, y in zip(b.logprobs, a.logprobs)) < 1e-4


def test_asking_whether_all_stopped_every_few_steps_changes_nothing(tiny, prompts):
    model, tokenizer = tiny
    greedy = SamplingParams(temperature=0, max_new_tokens=24)
    free = HFEngine(model, tokenizer).generate(prompts, greedy)
    eos = {c.token_ids[3 + i] for i, c in enumerate(free)}  # every row stops by step 3 + its index
    every_step = HFEngine(model, tokenizer, eos_token_ids=eos, cache_chunk=4).generate(prompts, greedy)
    assert all(c.finish_reason == "stop" for c in every_step)
    # as on CUDA (every 8): here the batch runs on past the last stop until a multiple of 5 steps
    sparse = HFEngine(model, tokenizer, eos_token_ids=eos, cache_chunk=4, stop_check=5).generate(prompts, greedy)
    assert [(c.token_ids, c.logprobs, c.finish_reason) for c in sparse] == \
        [(c.token_ids, c.logprobs, c.finish_reason) for c in every_step]


def test_greedy_matches_transformers_generate(tiny, prompts):
    model, tokenizer = tiny
    engine_ = HFEngine(model, tokenizer)
    ours = engine_.generate(prompts[2:3], SamplingParams(temperature=0, max_new_tokens=16))[0]
    theirs = model.generate(torch.tensor(prompts[2:3]), max_new_tokens=16, do_sample=False,
                            eos_token_id=sorted(engine_.eos_token_ids), pad_token_id=tokenizer.pad_token_id)
    assert ours.token_ids == theirs[0, len(prompts[2]):].tolist()[: len(ours.token_ids)]


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0, max_new_tokens=12),
    SamplingParams(temperature=1.0, max_new_tokens=12, seed=1),
    SamplingParams(temperature=0.7, top_k=20, max_new_tokens=12, seed=2),
    SamplingParams(temperature=0.6, top_k=20, top_p=0.5, max_new_tokens=12, seed=3),
    SamplingParams(temperature=0.9, top_p=0.3, max_new_tokens=12, seed=4),
], ids=["greedy", "t1", "t0.7-k20", "t0.6-k20-p0.5", "t0.9-p0.3"])
def test_logprobs_equal_teacher_forced_processed_distribution(tiny, prompts, params):
    model, tokenizer = tiny
    for prompt, completion in zip(prompts, HFEngine(model, tokenizer, cache_chunk=5).generate(prompts, params)):
        expected = reference_logprobs(model, prompt, completion.token_ids, params)
        assert torch.isfinite(expected).all(), "a sampled token lies outside the processed distribution"
        assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=1e-4)


def test_finish_reasons_and_max_new_tokens(tiny, prompts):
    model, tokenizer = tiny
    params = SamplingParams(temperature=0.8, max_new_tokens=7, seed=0)
    never_stops = HFEngine(model, tokenizer, eos_token_ids={len(tokenizer)})  # an id that is never sampled
    for c in never_stops.generate(prompts, params):
        assert c.finish_reason == "length" and len(c.token_ids) == len(c.logprobs) == 7
    sampled = never_stops.generate(prompts[:1], params)[0].token_ids
    stops = HFEngine(model, tokenizer, eos_token_ids={sampled[2]}).generate(prompts[:1], params)[0]
    assert stops.token_ids == sampled[: sampled.index(sampled[2]) + 1] and stops.finish_reason == "stop"
    one = HFEngine(model, tokenizer).generate(prompts, SamplingParams(temperature=0, max_new_tokens=1))
    assert all(len(c.token_ids) == 1 for c in one) and HFEngine(model, tokenizer).generate([], params) == []


def test_seeded_sampling_is_reproducible(tiny, prompts):
    model, tokenizer = tiny
    engine_ = HFEngine(model, tokenizer)
    params = SamplingParams(temperature=1.0, top_p=0.95, top_k=50, max_new_tokens=16, seed=7)
    first, second = engine_.generate(prompts, params), engine_.generate(prompts, params)
    assert [c.token_ids for c in first] == [c.token_ids for c in second]
    other = engine_.generate(prompts, dataclasses.replace(params, seed=8))
    assert [c.token_ids for c in first] != [c.token_ids for c in other]
    twins = engine_.generate([prompts[0]] * 2, params)  # one seed, still independent rows
    assert twins[0].token_ids != twins[1].token_ids


def test_load_weights_changes_generation_and_restoring_restores_it(tiny, prompts):
    model, tokenizer = tiny
    engine_ = HFEngine(model, tokenizer)
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    before = engine_.generate(prompts, greedy)
    original = [(name, p.detach().clone()) for name, p in model.named_parameters()]
    generator = torch.Generator().manual_seed(0)
    engine_.load_weights((name, p + 0.5 * torch.randn(p.shape, generator=generator)) for name, p in original)
    assert [c.token_ids for c in engine_.generate(prompts, greedy)] != [c.token_ids for c in before]
    engine_.load_weights(original)
    assert engine_.generate(prompts, greedy) == before
    with pytest.raises(KeyError, match="no parameter named 'not.a.weight'"):
        engine_.load_weights([("not.a.weight", torch.zeros(1))])


def sharded_generate_worker(rank, world, port, path):
    """One gloo rank: greedy generation from the FSDP2-sharded tiny model, noting after every layer's
    forward whether its weights were still whole (FSDP2 reshards in its own post-forward hook, which runs
    before ours)."""
    import datetime
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}",
                            timeout=datetime.timedelta(seconds=120))
    try:
        model, tokenizer = load_model("tiny", device="cpu")
        models.shard_model(model)
        whole = []
        for layer in model.model.layers:
            layer.register_forward_hook(lambda m, i, o: whole.append(not isinstance(m.mlp.up_proj.weight, DTensor)))
        prompts = [tokenizer.encode(text) for text in TEXTS]
        completions = HFEngine(model, tokenizer).generate(prompts, SamplingParams(temperature=0, max_new_tokens=12))
        resharded = all(isinstance(p, DTensor) for p in model.parameters())
        model(input_ids=torch.tensor([prompts[0]]))  # training-style forward: layers reshard after it again
        gathered_whole, after = list(whole), whole[-2:]
        # Where the model does not fit whole (a test double of the memory check), every forward gathers
        # layer by layer, to the same tokens, with one WARNING.
        models.room_for_whole, printed, engine_ = (lambda model: False), io.StringIO(), HFEngine(model, tokenizer)
        whole.clear()
        with contextlib.redirect_stdout(printed):
            ungathered = [engine_.generate(prompts, SamplingParams(temperature=0, max_new_tokens=12)) for _ in "ab"]
        # fp32 master weights computing in bf16, as on a GPU: every float mask SDPA is given is in the queries' dtype.
        bf16, masks, sdpa = load_model("tiny", device="cpu")[0], set(), torch.nn.functional.scaled_dot_product_attention
        models.shard_model(bf16, torch.bfloat16)

        def spy(query, key, value, attn_mask=None, **kwargs):
            masks.add((query.dtype, None if attn_mask is None else attn_mask.dtype))
            return sdpa(query, key, value, attn_mask=attn_mask, **kwargs)
        torch.nn.functional.scaled_dot_product_attention = spy
        HFEngine(bf16, tokenizer).generate(prompts, SamplingParams(temperature=0, max_new_tokens=4))
        if rank == 0:
            torch.save(dict(tokens=[c.token_ids for c in completions], whole=gathered_whole, resharded=resharded,
                            after=after, ungathered=[[c.token_ids for c in done] for done in ungathered],
                            ungathered_whole=list(whole), printed=printed.getvalue(), masks=masks), path)
    finally:
        dist.destroy_process_group()


def test_a_sharded_model_generates_gathered_and_is_resharded_after(tiny, prompts, tmp_path):
    # Under FSDP2 a generate call gathers the model once and decodes from local weights (no all-gather per
    # token), gives the tokens of the unsharded model, and leaves the model sharded for training.
    import torch.multiprocessing as mp
    from backend.launch import free_port
    mp.spawn(sharded_generate_worker, args=(2, free_port(), str(tmp_path / "out.pt")), nprocs=2)
    out = torch.load(tmp_path / "out.pt")
    model, tokenizer = tiny
    alone = HFEngine(model, tokenizer).generate(prompts, SamplingParams(temperature=0, max_new_tokens=12))
    assert out["tokens"] == [c.token_ids for c in alone]
    assert len(out["whole"]) > 2 * 10 and all(out["whole"][:-2])   # every layer forward while generating
    assert out["resharded"] and out["after"] == [False, False]
    assert out["ungathered"] == [out["tokens"]] * 2 and not any(out["ungathered_whole"])
    assert out["printed"].count("WARNING: the sharded model does not fit whole") == 1
    assert {query for query, _ in out["masks"]} == {torch.bfloat16}
    assert {mask for _, mask in out["masks"]} - {None, torch.bool} == {torch.bfloat16}


def test_bfloat16_generation_runs(prompts):
    model, tokenizer = load_model("tiny", device="cpu", dtype=torch.bfloat16)
    params = SamplingParams(top_k=20, max_new_tokens=8, seed=0)
    completions = HFEngine(model, tokenizer, cache_chunk=3).generate(prompts, params)
    assert all(len(c.token_ids) >= 1 and all(-1e9 < lp <= 0 for lp in c.logprobs) for c in completions)


def test_generate_restores_training_mode_and_attention(tiny, prompts):
    model, tokenizer = tiny
    model.train()
    model.set_attn_implementation("eager")
    try:
        HFEngine(model, tokenizer).generate(prompts[:1], SamplingParams(max_new_tokens=2))
        assert model.training and model.config._attn_implementation == "eager"
    finally:
        model.eval()
        model.set_attn_implementation("sdpa")


def test_random_qwen3_1_7b_cut_to_one_layer_generates():
    # bf16: the 151,936 x 2,048 embedding alone is 1.2 GB in float32.
    model, tokenizer = load_model("random-qwen3-1.7b:1", device="cpu", dtype=torch.bfloat16)
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
            config.head_dim, config.intermediate_size, config.vocab_size) == (2048, 1, 16, 8, 128, 6144, 151936)
    assert config.tie_word_embeddings and model.dtype == torch.bfloat16
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                            add_generation_prompt=True))
    [completion] = HFEngine(model, tokenizer).generate([prompt], SamplingParams(temperature=0, max_new_tokens=2))
    assert len(completion.token_ids) == 2 and completion.finish_reason == "length"
    assert isinstance(tokenizer.decode(completion.token_ids), str)  # ids past the byte vocabulary decode to ""


def test_the_push_sends_moe_experts_fused_as_vllms_loader_takes_them(monkeypatch):
    # vLLM 0.33's fused-MoE loader takes transformers' packed expert tensors, `experts.gate_up_proj`
    # [E, 2I, H] split along dim 1 with the gate rows first and `experts.down_proj` [E, H, I] (Qwen3-MoE
    # is not `is_fused_checkpoint_transposed`): two tensors a layer, not three per expert.

    class LLM:   # a test double of vllm.LLM: records what reaches the workers
        def collective_rpc(self, method, kwargs):
            self.pushed = list(kwargs["weights_iterator"])

        def reset_prefix_cache(self):
            pass

    model, _ = load_model("tiny-moe", device="cpu")
    vllm_engine = object.__new__(engine.VLLMEngine)   # its state without vLLM itself
    vllm_engine.llm, vllm_engine.moe, vllm_engine.asleep, vllm_engine.sleep_mode = LLM(), True, set(), False
    vllm_engine.dtype, vllm_engine.tied = torch.bfloat16, False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # a MoE push is CUDA's (refused on CPU)
    engine.push_weights(model, vllm_engine)
    pushed = dict(vllm_engine.llm.pushed)
    assert pushed.keys() == dict(model.named_parameters()).keys()
    assert [n for n in pushed if ".experts." in n] == [f"model.layers.{layer}.mlp.experts.{p}" for layer in (0, 1)
                                                       for p in ("gate_up_proj", "down_proj")]
    gate_up, down = pushed["model.layers.0.mlp.experts.gate_up_proj"], pushed["model.layers.0.mlp.experts.down_proj"]
    assert gate_up.shape == (4, 2 * 64, 128) and down.shape == (4, 128, 64)
    assert all(t.dtype == torch.bfloat16 for t in pushed.values())   # the engine's dtype, cast before gathering
    experts, x = model.model.layers[0].mlp.experts, torch.randn(5, 128)
    with torch.no_grad():
        packed = experts(x, torch.full((5, 1), 1), torch.ones(5, 1))  # every token to expert 1, weight 1
        gate, up = gate_up[1].float().chunk(2, dim=0)                 # as vLLM splits w13 into w1, w3
        loaded = (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down[1].float().T
    torch.testing.assert_close(loaded, packed, atol=0.05, rtol=0.05)   # bf16 weights


@needs_vllm
def test_vllm_moe_matches_hf_engine_and_pushes_only_on_cuda(prompts):
    # fp32 on both devices: two bf16 MoE implementations do not agree to 1e-3 in log-prob
    model, tokenizer = load_model("tiny-moe", device="cuda" if torch.cuda.is_available() else "cpu",
                                  dtype=torch.float32)
    vllm_engine = engine.make_engine(model, tokenizer, kind="vllm", max_model_len=256)
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    before = vllm_engine.generate(prompts, greedy)
    hf = HFEngine(model, tokenizer).generate(prompts, greedy)
    assert [c.token_ids for c in before] == [c.token_ids for c in hf]
    assert max(abs(x - y) for a, b in zip(before, hf) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3
    original = [(name, p.detach().clone()) for name, p in model.named_parameters()]
    if not torch.cuda.is_available():
        with pytest.raises(NotImplementedError, match="MoE"):
            vllm_engine.load_weights(original)
        return
    vllm_engine.load_weights((n, p + 0.5 * torch.randn_like(p) if "experts" in n else p) for n, p in original)
    assert [c.token_ids for c in vllm_engine.generate(prompts, greedy)] != [c.token_ids for c in before]
    vllm_engine.load_weights(original)
    assert [c.token_ids for c in vllm_engine.generate(prompts, greedy)] == [c.token_ids for c in before]


def test_make_engine_rejects_unknown_kind(tiny):
    assert isinstance(engine.make_engine(*tiny), HFEngine)
    with pytest.raises(ValueError, match="unknown engine"):
        engine.make_engine(*tiny, kind="sglang")


@pytest.mark.slow
def test_smollm2_loads_offline_and_generates(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    start = time.time()
    model, tokenizer = load_model("smollm2-135m", device="cpu")
    messages = [{"role": "user", "content": "What is 2+2? Answer with a number."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    [completion] = HFEngine(model, tokenizer).generate([prompt], SamplingParams(temperature=0, max_new_tokens=8))
    assert len(completion.token_ids) >= 1 and "4" in tokenizer.decode(completion.token_ids)
    tool = {"type": "function", "function": {"name": "lookup"}}
    assert '<tools>\n{"type": "function", "function": {"name": "lookup"}}\n</tools>' in \
        tokenizer.apply_chat_template(messages, tools=[tool], tokenize=False)
    print(f"smollm2-135m: load + generate {time.time() - start:.1f}s")


@pytest.mark.parametrize("name, dtype", [("tiny", torch.float32), ("tiny-moe", torch.bfloat16)])
def test_decode_step_and_sampling_never_wait_for_the_device(name, dtype):
    """What a CUDA graph capture forbids, checked on the CPU: no value read back to the host.

    Under a FakeTensorMode, tensors have shapes but no values, so `.item()`, `bool()`, `nonzero()`
    and `tolist()` raise (checked first). The decode step with its cache, then the sampling, must not.
    It cannot see host-to-device copies, which capture also forbids: the GPU test does.
    """
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode

    from compute import attention

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        probe = mode.from_tensor(torch.ones(3))
        for read_back in (lambda: bool(probe.sum() > 0), probe.nonzero, probe.tolist):
            with pytest.raises((DataDependentOutputException, DynamicOutputShapeException)):
                read_back()
    model, tokenizer = load_model(name, device="cpu", dtype=dtype)
    hf_engine = HFEngine(model, tokenizer)
    with torch.no_grad(), attention.implementation(model, "decode"):
        cache, _ = hf_engine._prefill([[1, 2, 3, 4], [5, 6, 7]], 4, 16)
        step = hf_engine._decode_step(cache, 2, 16)
        with mode:
            for layer in cache.layers:
                layer.keys, layer.values = mode.from_tensor(layer.keys), mode.from_tensor(layer.values)
                layer.cumulative_length = mode.from_tensor(layer.cumulative_length)
            tokens, positions = torch.zeros(2, 1, dtype=torch.long), torch.full((2, 1), 4)
            logits = step(tokens, positions, torch.zeros(2, 1, 1, 16, dtype=dtype))
            for params in (SamplingParams(temperature=0), SamplingParams(0.6, 0.95, 20), SamplingParams(1.0, 0.9)):
                sampled, logprobs = engine.sample_next(logits, params)
                assert sampled.shape == logprobs.shape == (2,)


def test_generate_bench_measures_both_paths(tiny, capsys):
    """bench/generate_bench.py's measurement on the tiny model: both paths spend the whole token budget
    and give a finite ratio (a path that raised would print "failed" and give nan)."""
    import math
    from bench import generate_bench

    model, tokenizer = tiny
    with torch.random.fork_rng():   # model.generate samples from the global generator: leave it as it was
        row = generate_bench.measure(model, tokenizer, batch=3, prompt_len=8, new_tokens=12)
    assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
    assert "failed" not in capsys.readouterr().out


def test_a_failed_graph_capture_falls_back_to_eager_decoding(tiny, prompts, monkeypatch, capsys):
    """Test double for CUDA on the CPU: streams that do nothing and a capture that fails, as capture does
    on a host sync, after the real warm-up step has run (and moved the cache's write column)."""
    class NoStream:
        def wait_stream(self, other):
            pass

    def failing_capture(graph):
        raise RuntimeError("operation not permitted when stream is capturing\n(details)")

    for name, value in dict(Stream=NoStream, current_stream=NoStream, stream=lambda s: contextlib.nullcontext(),
                            CUDAGraph=object, graph=failing_capture).items():
        monkeypatch.setattr(torch.cuda, name, value)
    model, tokenizer = tiny
    params = SamplingParams(temperature=0, max_new_tokens=20)
    eager = HFEngine(model, tokenizer, cache_chunk=8).generate(prompts, params)
    hf_engine = HFEngine(model, tokenizer, cache_chunk=8)
    hf_engine.cuda_graphs = True
    fell_back = hf_engine.generate(prompts, params)
    assert [(c.token_ids, c.logprobs) for c in fell_back] == [(c.token_ids, c.logprobs) for c in eager]
    assert not hf_engine.cuda_graphs
    assert capsys.readouterr().out.count("WARNING: CUDA-graph capture of the decode step failed") == 1


@needs_cuda
@pytest.mark.parametrize("name, dtype", [("tiny", torch.float32), ("tiny-moe", torch.bfloat16)])
def test_cuda_graph_steps_match_eager_steps(prompts, name, dtype):  # MoE: not graphed by default; can it be?
    model, tokenizer = load_model(name, device="cuda", dtype=dtype)
    params = SamplingParams(temperature=0, max_new_tokens=40)
    graphed = HFEngine(model, tokenizer, cache_chunk=16, cuda_graphs=True).generate(prompts, params)
    eager = HFEngine(model, tokenizer, cache_chunk=16, cuda_graphs=False).generate(prompts, params)
    assert [c.token_ids for c in graphed] == [c.token_ids for c in eager]


@needs_vllm
def test_vllm_matches_hf_engine_and_takes_pushed_weights(tiny, prompts):
    model, tokenizer = tiny
    vllm_engine = engine.make_engine(model, tokenizer, kind="vllm", max_model_len=256)
    hf_engine = HFEngine(model, tokenizer)
    greedy = SamplingParams(temperature=0, max_new_tokens=16)

    def assert_same(ours: list[Completion], theirs: list[Completion]):
        assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]
        for a, b in zip(ours, theirs):
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3

    before = vllm_engine.generate(prompts, greedy)
    assert_same(before, hf_engine.generate(prompts, greedy))
    too_long = vllm_engine.generate([prompts[0], prompts[0][:1] * 256], greedy)   # max_model_len 256
    assert too_long[1] == Completion([], [], "length") and too_long[0].token_ids == before[0].token_ids
    original = [(name, p.detach().clone()) for name, p in model.named_parameters()]
    generator = torch.Generator().manual_seed(0)
    vllm_engine.load_weights((n, p + 0.5 * torch.randn(p.shape, generator=generator)) for n, p in original)
    assert [c.token_ids for c in vllm_engine.generate(prompts, greedy)] != [c.token_ids for c in before]
    vllm_engine.load_weights(original)
    assert_same(vllm_engine.generate(prompts, greedy), before)
    # vLLM set up a one-process torch.distributed group of its own: that is no FSDP2 run
    import grpo
    assert torch.distributed.is_initialized() and not models.is_sharded(model)
    assert type(grpo.make_optimizer(model)) is torch.optim.AdamW


@needs_vllm
@needs_cuda
def test_vllm_sleep_push_wake_cycle(prompts):
    """A step's cycle on CUDA in one engine (vLLM takes one sleep-mode engine a process; eager: no compile or
    graph capture, so that bench/gpu_check.sh's step fits): generate, sleep through an update, push, wake,
    and generate what the HF engine generates with the updated weights."""
    model, tokenizer = load_model("tiny", device="cuda", dtype=torch.float32)
    vllm_engine = engine.make_engine(model, tokenizer, kind="vllm", max_model_len=256, gpu_memory_utilization=0.2,
                                     enforce_eager=True)
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    tokens = lambda completions: [c.token_ids for c in completions]
    before = vllm_engine.generate(prompts, greedy)
    assert tokens(before) == tokens(HFEngine(model, tokenizer).generate(prompts, greedy))
    vllm_engine.sleep()
    with pytest.raises(AssertionError, match="asleep"):
        vllm_engine.generate(prompts, greedy)
    generator = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():   # the update, as far as the engine can tell
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=generator, device="cuda"))
    engine.push_weights(model, vllm_engine)   # wakes the weights, writes them, wakes the KV cache
    after = vllm_engine.generate(prompts, greedy)
    assert tokens(after) != tokens(before)
    assert tokens(after) == tokens(HFEngine(model, tokenizer).generate(prompts, greedy))
