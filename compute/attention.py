"""The attention kernels a model is switched to while it generates or trains, and the switch itself.

transformers looks a model's attention function up by name (`model.set_attn_implementation`); two of
ours are registered under its public extension points (AttentionInterface, AttentionMaskInterface),
and `implementation(model, name)` uses one for the length of a `with` block, whatever the model had
before (eager, sdpa, flash attention):

    with attention.implementation(model, "decode"):             # engine.HFEngine: batched decoding
    with attention.implementation(model, route(model)):         # grpo.py: packed training rows

Names: "decode" (`grouped_decode_attention`), "flash" (flash-attn's varlen path, if installed),
"torch_varlen" (`torch_varlen_attention`, PyTorch's own varlen kernel) and "padded" (nothing to switch).
Deliberately not here: sliding-window layers, paged KV caches, attention during prefill of packed rows.
"""
import contextlib
import importlib.util
import inspect

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import flash_attention_mask, sdpa_mask


def grouped_decode_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' SDPA attention, except that a one-token query reads shared key/value heads in place.

    Given a mask, transformers repeats each key/value head for every query head that shares it (GQA),
    which copies the whole KV cache in every layer at every decode step. A decode step needs no copy:
    the query heads of one KV head become its "query positions", [B, kv, groups, D] against
    [B, kv, S, D], with the mask [B, 1, 1, S] broadcasting over both.
    """
    batch, heads, length, dim = query.shape
    groups = heads // key.shape[1]
    if length > 1 or groups == 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query.reshape(batch, key.shape[1], groups, dim), key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, 1, heads, dim), None  # [B, q_len, heads, D], as transformers expects


def torch_varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           cu_seq_lens_q=None, max_length_q=None, **kwargs):
    """A transformers attention function over one packed row with PyTorch's own varlen flash kernel.

    query [1, Hq, T, D], key/value [1, Hkv, T, D] -> ([1, T, Hq, D], None), causal within each sample.
    """
    from torch.nn.attention.varlen import varlen_attn
    assert cu_seq_lens_q is not None, "packed rows need cu_seq_lens_q (the micro-batch's varlen kwargs)"
    assert kwargs.get("sliding_window") is None, "sliding-window layers are not supported here"
    q, k, v = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))  # [T, H, D]
    gqa = {}
    if q.shape[1] != k.shape[1]:  # shared KV heads: torch >= 2.13 reads them in place, 2.11 needs copies
        if "enable_gqa" in inspect.signature(varlen_attn).parameters:
            gqa = dict(enable_gqa=True)
        else:
            k, v = (x.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for x in (k, v))
    out = varlen_attn(q, k, v, cu_seq_lens_q, cu_seq_lens_q, max_length_q, max_length_q, scale=scaling,
                      window_size=(-1, 0), **gqa)
    return out.unsqueeze(0), None


AttentionInterface.register("spade_decode", grouped_decode_attention)
AttentionMaskInterface.register("spade_decode", sdpa_mask)
AttentionInterface.register("spade_torch_varlen", torch_varlen_attention)
# Like flash attention, no mask tensor: sample boundaries come from cu_seq_lens.
AttentionMaskInterface.register("spade_torch_varlen", flash_attention_mask)
IMPLEMENTATIONS = {"decode": "spade_decode", "flash": "flash_attention_2", "torch_varlen": "spade_torch_varlen"}


def route(model) -> str:
    """How the update runs packed rows: 'flash' (flash-attn, through transformers), 'torch_varlen'
    (torch.nn.attention.varlen) or 'padded'.

    The varlen kernels are CUDA-only and need 16-bit compute (FSDP2's fp32 master weights compute in
    bf16: models.shard_model); everything else (CPU, float32) trains on length-sorted padded rows with
    the model's own SDPA.
    """
    param = next(model.parameters())
    if param.device.type != "cuda" or getattr(model, "compute_dtype", param.dtype) not in (torch.bfloat16, torch.float16):
        return "padded"
    if importlib.util.find_spec("flash_attn") is not None:
        return "flash"
    if importlib.util.find_spec("torch.nn.attention.varlen") is not None:
        return "torch_varlen"
    return "padded"


@contextlib.contextmanager
def implementation(model, name: str):
    """The model attends with `name`'s kernel inside the block and with its own one afterwards. The
    trainer and the in-process engine share one model, and each kernel here serves one of them only."""
    if name == "padded":
        yield
        return
    assert name in IMPLEMENTATIONS, f"unknown attention implementation {name!r}"
    previous = model.config._attn_implementation  # transformers has no public getter
    model.set_attn_implementation(IMPLEMENTATIONS[name])
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
