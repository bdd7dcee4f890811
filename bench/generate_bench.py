"""Decode throughput: transformers' `model.generate` against `engine.HFEngine.generate`, side by side.

    python bench/generate_bench.py --quick     # CPU: the tiny model, batch 1, 8, 32
    python bench/generate_bench.py             # CUDA: a random Qwen3-1.7B-shaped model, batch 32, 128, 256

Both sample with the agent's settings (T 0.6, top_p 0.95, top_k 20) from the same random prompts of
equal length, and both spend the whole token budget: EOS never stops them (`min_new_tokens` for
transformers, an EOS id outside the vocabulary for HFEngine), so tokens per second compare like for
like. Every measurement follows one unmeasured warm-up at the same batch size (8 tokens for
`model.generate`; the whole call for HFEngine, whose CUDA graphs are captured per cache shape).
`ratio` is HFEngine over `model.generate`; the target is >= 5x at batch 256 on an H200. Random
weights make no difference to the speed of a dense model.
"""
import argparse
import pathlib
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from backend import engine  # noqa: E402
from backend import models  # noqa: E402

SAMPLING = dict(temperature=0.6, top_p=0.95, top_k=20)


def qwen3_1_7b_shaped(device):
    """Qwen3-1.7B's shapes (28 layers, hidden 2048, GQA 16/8, vocab 151,936) with random bf16 weights."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                         num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                         max_position_embeddings=40960)
    with torch.device(device):  # initialise on the GPU: 1.7B random weights on the CPU take minutes
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    return model.eval()


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(model, tokenizer, batch, prompt_len, new_tokens, seed=0):
    vocab = model.config.vocab_size
    prompts = torch.randint(0, vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(seed))
    hf_engine = engine.HFEngine(model, tokenizer, eos_token_ids={vocab})  # an id that is never sampled
    params = engine.SamplingParams(**SAMPLING, max_new_tokens=new_tokens, seed=seed)

    def transformers_generate(warm_up=False):
        ids, n = prompts.to(model.device), 8 if warm_up else new_tokens   # nothing shape-bound to warm up
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, **SAMPLING,
                                 max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
        assert out.shape == (batch, prompt_len + n)

    def ours(warm_up=False):   # the warm-up is the full call: CUDA graphs are captured per cache shape
        completions = hf_engine.generate(prompts.tolist(), params)
        assert all(len(c.token_ids) == new_tokens for c in completions)

    row = {"batch": batch}
    for name, fn in (("generate", transformers_generate), ("HFEngine", ours)):
        try:
            fn(warm_up=True)  # kernels, allocator, CUDA graphs
            seconds = timed(fn)
        except (RuntimeError, AssertionError) as error:  # one failed path still leaves the other's numbers
            print(f"batch {batch} {name} failed: {type(error).__name__}: {error}", flush=True)
            seconds = float("nan")
        row[f"{name} tok/s"] = batch * new_tokens / seconds
        row[f"{name} ms/step"] = 1000 * seconds / new_tokens
        print(f"batch {batch} {name}: {row[f'{name} ms/step']:.2f} ms/step", flush=True)
    row["ratio"] = row["HFEngine tok/s"] / row["generate tok/s"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny model on the CPU, small batches")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="default: 1 8 32 (--quick), else 32 128 256")
    parser.add_argument("--prompt-len", type=int, default=None, help="default: 32 (--quick), else 256")
    parser.add_argument("--new-tokens", type=int, default=None, help="default: 64 (--quick), else 128")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    quick = args.quick or not torch.cuda.is_available()
    model, tokenizer = models.load_model("tiny", device="cuda" if torch.cuda.is_available() else "cpu")
    name = "tiny"
    if not quick:
        model, name = qwen3_1_7b_shaped("cuda"), "Qwen3-1.7B-shaped (random, bf16)"
    batches = args.batch_sizes or ([1, 8, 32] if quick else [32, 128, 256])
    prompt_len = args.prompt_len or (32 if quick else 256)
    new_tokens = args.new_tokens or (64 if quick else 128)
    rows = [measure(model, tokenizer, batch, prompt_len, new_tokens) for batch in batches]

    print(f"\n{name} on {model.device}, prompt {prompt_len} tokens, {new_tokens} new tokens, {SAMPLING}")
    columns = list(rows[0])
    print(" | ".join(f"{c:>16}" for c in columns))
    print(" | ".join("-" * 16 for _ in columns))
    for row in rows:
        print(" | ".join(f"{row[c]:>16.4g}" if isinstance(row[c], float) else f"{row[c]:>16}" for c in columns))


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s in all)")
