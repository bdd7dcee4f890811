"""packing.py: the micro-batch plan and the split of a batch between ranks."""
from compute import packing
from grpo import Sample


def test_plan_micro_batches_worked_example():
    assert packing.plan_micro_batches([3, 9, 4, 5], 12, padded=False) == [[1], [3, 2, 0]]
    assert packing.plan_micro_batches([3, 9, 4, 5], 12, padded=True) == [[1], [3, 2], [0]]
    lengths = [7, 1, 30, 12, 12, 5, 2, 9]
    for padded in (False, True):
        plan = packing.plan_micro_batches(lengths, 16, padded)
        assert sorted(i for group in plan for i in group) == list(range(len(lengths)))
        for group in plan:
            cost = len(group) * max(lengths[i] for i in group) if padded else sum(lengths[i] for i in group)
            assert cost <= 16 or len(group) == 1


def test_samples_for_rank_balances_lengths():
    samples = [Sample([1] * n, [0] * n, [0.0] * n, 0.0) for n in (3, 9, 4, 5)]
    assert [len(s.tokens) for s in packing.samples_for_rank(samples, 0, 2)] == [9, 4]
    assert [len(s.tokens) for s in packing.samples_for_rank(samples, 1, 2)] == [5, 3]
