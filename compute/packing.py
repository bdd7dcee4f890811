"""Packing: grpo.Samples into micro-batches by a token budget, and back.

A micro-batch is one packed row (samples concatenated without padding, for variable-length attention
on CUDA) or length-sorted right-padded rows (SDPA elsewhere); its loss side is always padded per-sample
rows. `per_sample` maps values of the model's predicting positions back onto those rows.
Under torch.distributed each rank takes its length-balanced share first (`samples_for_rank`).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence


def plan_micro_batches(lengths: list[int], token_budget: int, padded: bool) -> list[list[int]]:
    """Group sample indices into micro-batches whose cost stays within token_budget, longest first.

    Cost is the tokens actually computed: their sum when packed, rows x longest row when padded (sorting
    by length keeps that padding small). A sample longer than the budget gets a micro-batch alone.
    Example, lengths [3, 9, 4, 5], budget 12: packed -> [[1], [3, 2, 0]] (9 | 5 + 4 + 3 = 12);
    padded -> [[1], [3, 2], [0]] (9 | 2 x 5 = 10; adding the 3 would make 3 x 5 = 15).
    """
    batches = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        candidate = (batches[-1] if batches else []) + [i]
        cost = len(candidate) * lengths[candidate[0]] if padded else sum(lengths[j] for j in candidate)
        if len(candidate) > 1 and cost <= token_budget:
            batches[-1] = candidate
        else:
            batches.append([i])
    return batches


def samples_for_rank(samples: list, rank: int, world_size: int) -> list:
    """This rank's share of the batch: sorted by length, dealt round-robin, so token counts balance.

    Example: lengths [3, 9, 4, 5], 2 ranks -> rank 0 gets lengths [9, 4], rank 1 gets [5, 3].
    """
    order = sorted(range(len(samples)), key=lambda i: -len(samples[i].tokens))
    return [samples[i] for i in order[rank::world_size]]


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [B, S] padded rows, or [1, T] one packed row
    position_ids: torch.Tensor  # same shape; restarts at 0 at every sample when packed
    attention_mask: torch.Tensor | None  # [B, S], 1 on real tokens (padded); None when packed
    varlen: dict  # cu_seq_lens_q/k, max_length_q/k: transformers' variable-length attention kwargs
    lengths: list[int]
    loss_mask: torch.Tensor  # [B, L] float, L = longest sample (the loss side is always padded rows)
    rollout_logprobs: torch.Tensor  # [B, L]
    advantages: torch.Tensor  # [B]
    weights: torch.Tensor  # [B] each sample's share of the batch mean (grpo.Sample.weight)

    @property
    def packed(self) -> bool:
        return self.attention_mask is None


def collate(samples: list, packed: bool, device) -> MicroBatch:
    """Tensors for one micro-batch: one packed row (varlen attention) or right-padded rows. Built on the
    host and copied from pinned memory without waiting: the GPU is still busy with the micro-batch before."""
    def to_device(tensor):
        if torch.device(device).type != "cuda":
            return tensor.to(device)
        return tensor.pin_memory().to(device, non_blocking=True)

    def rows(field, dtype):
        return to_device(pad_sequence([torch.tensor(getattr(s, field), dtype=dtype) for s in samples], batch_first=True))

    lengths = [len(s.tokens) for s in samples]
    attention_mask, varlen = None, {}   # one packed row has no mask; padded rows no varlen kwargs
    if packed:
        input_ids = to_device(torch.tensor([t for s in samples for t in s.tokens])[None])
        position_ids = to_device(torch.cat([torch.arange(n) for n in lengths])[None])
        cu = to_device(torch.tensor([0] + lengths).cumsum(0).to(torch.int32))
        varlen = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(lengths), max_length_k=max(lengths))
    else:
        input_ids = rows("tokens", torch.long)  # padding id 0 is never attended to nor scored
        width = input_ids.shape[1]
        attention_mask = to_device((torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long())
        position_ids = torch.arange(width, device=device).expand_as(input_ids)
    return MicroBatch(input_ids, position_ids, attention_mask, varlen, lengths,
                      rows("loss_mask", torch.float32), rows("rollout_logprobs", torch.float32),
                      to_device(torch.tensor([s.advantage for s in samples], dtype=torch.float32)),
                      to_device(torch.tensor([s.weight for s in samples], dtype=torch.float32)))


def per_sample(flat, batch: MicroBatch):
    """Values of the F predicting positions -> per-sample rows [B, L]: token i of a sample gets the value
    of the position before it; 0 at position 0, on padding and where a packed row crosses samples."""
    num_rows, length = batch.input_ids.shape
    shifted = F.pad(flat.view(num_rows, length - 1), (1, 0))  # [R, S]
    if not batch.packed:
        return shifted * batch.attention_mask  # padding positions score the pad id: zero them
    # Each sample's first position holds the previous sample's last prediction: zero it.
    per_sample = pad_sequence(list(shifted[0].split(batch.lengths)), batch_first=True)
    return F.pad(per_sample[:, 1:], (1, 0))
