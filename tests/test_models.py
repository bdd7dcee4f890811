"""models.py: model names and aliases, the tiny model and its tokenizer, loading from a checkpoint, the
random-weight shapes, one clear error for an unknown model, and sharded loading on several ranks."""
import doctest
import os

import huggingface_hub
import pytest
import torch

from backend import engine, models
from backend.models import ModelLoadError, load_model, resolve_model_name


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu")


def test_docstring_examples():
    assert doctest.testmod(models).failed == 0


def test_aliases():
    assert resolve_model_name("Qwen3-30B-A3B") == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert resolve_model_name("Qwen3-8B") == "Qwen/Qwen3-8B"
    assert resolve_model_name("Qwen3-4B") == "Qwen/Qwen3-4B-Instruct-2507"
    assert resolve_model_name("tiny") == "tiny"
    assert resolve_model_name("some/local-or-hub-model") == "some/local-or-hub-model"
    gguf = resolve_model_name("smollm2-135m")
    assert gguf.endswith(".gguf") and os.path.isfile(gguf)


def test_tiny_tokenizer_round_trips_and_template(tiny):
    model, tokenizer = tiny
    text = 'héllo 日本 <tool_call>\n{"name": "f"}\n</tool_call>\tend'
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.convert_tokens_to_ids("<tool_call>") in ids  # one token, kept by skip_special_tokens
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert model.config.vocab_size == len(tokenizer) < 1000
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    plain = tokenizer.apply_chat_template(messages, tokenize=False)
    assert plain == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == plain + "<|im_start|>assistant\n"
    tool = {"type": "function", "function": {"name": "lookup", "description": "Find a key.", "parameters": {}}}
    chat = messages + [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "lookup", "arguments": {"k": 1}}}]},
        {"role": "tool", "content": "42"},
        {"role": "tool", "content": "43"},
    ]
    with_tools = tokenizer.apply_chat_template(chat, tools=[tool], tokenize=False)
    assert with_tools.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n") and '"name": "lookup"' in with_tools
    assert '<tool_call>\n{"name": "lookup", "arguments": {"k": 1}}\n</tool_call><|im_end|>' in with_tools
    assert with_tools.endswith(
        "<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n43\n</tool_response><|im_end|>\n")


def test_tiny_is_deterministic_and_reloads_from_a_checkpoint(tiny, tmp_path):
    model, tokenizer = tiny
    again, _ = load_model("tiny", device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded, reloaded_tokenizer = load_model(str(tmp_path), device="cpu")
    ids = tokenizer.encode("checkpoint")
    assert reloaded_tokenizer.encode("checkpoint") == ids
    assert reloaded_tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == \
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    with torch.no_grad():
        assert torch.allclose(model(torch.tensor([ids])).logits, reloaded(torch.tensor([ids])).logits, atol=1e-6)


def load_sharded_worker(rank, world, port, path, corrupt):
    """One gloo rank: the tiny models through models.load_sharded, where only rank 0 may read a checkpoint;
    then two loads that fail on rank 0 (an unknown name; a truncated weights file)."""
    import datetime
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}",
                            timeout=datetime.timedelta(seconds=120))
    try:
        if rank != 0:   # a test double: any read of the model by another rank fails the test
            models.load_model = lambda *args, **kwargs: pytest.fail("a rank other than 0 loaded the model")
        out = {}
        for name in ("tiny", "tiny-moe"):
            model, tokenizer = models.load_sharded(name, device="cpu")
            ids = torch.tensor([tokenizer.encode("<|im_start|>user\nHi there<|im_end|>")])
            out[name] = dict(weights={key: tensor.clone() for key, tensor in engine.full_named_parameters(model)},
                             buffers=dict(model.named_buffers()), logits=model(input_ids=ids).logits.detach(),
                             ids=ids, template=tokenizer.chat_template, eos=model.generation_config.eos_token_id)
        for bad in ("random-no-such-shape", corrupt):
            try:
                models.load_sharded(bad, device="cpu")
            except Exception as e:
                out[bad] = f"{type(e).__name__}: {e}"
        torch.save(out, f"{path}.{rank}")
    finally:
        dist.destroy_process_group()


def test_load_sharded_reads_on_rank_0_and_gives_every_rank_the_same_model(tmp_path):
    # Several ranks: rank 0 alone reads the model; the others build it on the meta device and receive
    # their shards and the buffers that no state dict holds (the rotary frequencies), so every rank
    # computes the logits of the model loaded in one process, dense or MoE (packed expert tensors).
    # A load that fails on rank 0 fails on every rank with rank 0's message, whatever the error.
    import torch.multiprocessing as mp
    from backend.launch import free_port
    corrupt = tmp_path / "corrupt"
    model, tokenizer = load_model("tiny", device="cpu")
    model.save_pretrained(corrupt)
    tokenizer.save_pretrained(corrupt)
    weights = (corrupt / "model.safetensors").read_bytes()
    (corrupt / "model.safetensors").write_bytes(weights[:len(weights) // 2])
    mp.spawn(load_sharded_worker, args=(2, free_port(), str(tmp_path / "out"), str(corrupt)), nprocs=2)
    outs = [torch.load(tmp_path / f"out.{rank}") for rank in (0, 1)]
    for name in ("tiny", "tiny-moe"):
        alone, tokenizer = load_model(name, device="cpu")
        for out in (o[name] for o in outs):
            assert out["weights"].keys() == dict(alone.named_parameters()).keys()
            for key, param in alone.named_parameters():
                assert torch.equal(out["weights"][key], param), key
            for key, buffer in alone.named_buffers():
                assert torch.equal(out["buffers"][key], buffer), key
            torch.testing.assert_close(out["logits"], alone(input_ids=out["ids"]).logits, rtol=1e-5, atol=1e-5)
            assert out["template"] == tokenizer.chat_template and out["eos"] == alone.generation_config.eos_token_id
    assert all("unknown random model" in o["random-no-such-shape"] for o in outs)
    assert outs[0][str(corrupt)].startswith("SafetensorError: ")   # rank 0's own error
    assert outs[1][str(corrupt)].startswith(f"ModelLoadError: rank 0 could not load '{corrupt}': ")


def test_unknown_model_offline_gives_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for name in ["no-such-org/no-such-model", str(tmp_path / "missing")]:
        with pytest.raises(ModelLoadError, match="--model smollm2-135m"):
            load_model(name, device="cpu")
    # A typo is neither an alias, a directory nor a hub id: an error at once, naming what is known.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)   # it must not reach the hub
    with pytest.raises(ModelLoadError, match=r"unknown model 'tinyy': not one of \['Qwen3-30B-A3B'"):
        load_model("tinyy", device="cpu")
    assert resolve_model_name("QWEN3-4b") == "Qwen/Qwen3-4B-Instruct-2507"   # aliases in any case
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qwen3-4b").mkdir()   # ... but a local model comes first, whatever its name
    assert resolve_model_name("qwen3-4b") == "qwen3-4b" and resolve_model_name("random-runs/r1") == "random-runs/r1"


def test_random_shapes_have_the_real_parameter_counts():
    # On the meta device: the shapes without the memory (Qwen3-1.7B ties its embeddings; 30B-A3B is MoE).
    billions = {"random-qwen3-1.7b": 1.72, "random-qwen3-4b": 4.02, "random-qwen3-8b": 8.19, "random-qwen3-30b-a3b": 30.53}
    for name, expected in billions.items():
        model, _ = load_model(name, device="meta", dtype=torch.bfloat16)
        assert round(sum(p.numel() for p in model.parameters()) / 1e9, 2) == expected, name
    cut, _ = load_model("random-qwen3-30b-a3b:2", device="meta", dtype=torch.bfloat16)
    assert cut.config.num_hidden_layers == 2 and cut.config.num_experts == 128
    for bad in ["random-qwen3-9b", "random-qwen3-8b:0", "random-qwen3-8b:x"]:
        with pytest.raises(ModelLoadError, match="unknown random model"):
            load_model(bad, device="meta")
