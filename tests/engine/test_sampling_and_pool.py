"""Sampling filters and seeded reproducibility; the paged pool's page accounting."""

from __future__ import annotations

import pytest
import torch

from tokenrouter.engine.base import SamplingParams
from tokenrouter.engine.kv_pool import KVLayout, KVPool, pool_tokens
from tokenrouter.engine.sampling import filtered_probs, sample
from tokenrouter.errors import CapacityError

LOGITS = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))


def test_filters_keep_the_right_tokens() -> None:
    p = filtered_probs(LOGITS, SamplingParams(temperature=1.0, top_k=2))
    torch.testing.assert_close(p, torch.tensor([0.625, 0.375, 0.0, 0.0]))
    p = filtered_probs(LOGITS, SamplingParams(temperature=1.0, top_p=0.8))  # 0.5 + 0.3 reaches 0.8
    torch.testing.assert_close(p, torch.tensor([0.625, 0.375, 0.0, 0.0]))
    p = filtered_probs(LOGITS, SamplingParams(temperature=1.0, top_p=0.81))
    assert (p > 0).tolist() == [True, True, True, False]
    assert filtered_probs(LOGITS, SamplingParams(temperature=1e-3))[0] == pytest.approx(1.0)


def test_seeded_draws_depend_on_seed_and_position_only() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    ps = [SamplingParams(temperature=1.0, seed=s) for s in (1, 2, 1)]
    a = sample(logits, ps, [10, 10, 10])
    assert a[0] == a[2]
    assert sample(logits[:1], ps[:1], [10]) == a[:1]  # alone or batched: same draw
    draws = {tuple(sample(logits[:1], ps[:1], [pos])) for pos in range(40)}
    assert len(draws) > 5  # positions give different draws
    assert sample(logits, [SamplingParams()] * 3, [0, 0, 0]) == logits.argmax(-1).tolist()


def test_sampling_follows_the_distribution() -> None:
    counts = torch.zeros(4)
    for pos in range(4000):
        counts[sample(LOGITS[None], [SamplingParams(temperature=1.0, seed=3)], [pos])[0]] += 1
    torch.testing.assert_close(counts / counts.sum(), LOGITS.exp(), atol=0.03, rtol=0)


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=1e-300, seed=1),  # 1/T overflows: was NaN and failed the whole batch
    SamplingParams(temperature=5e-324, seed=1),
    SamplingParams(temperature=float("nan"), seed=1),
    SamplingParams(temperature=1e-5, seed=1),
    SamplingParams(temperature=1e300, seed=1),  # inf once cast to float32
    SamplingParams(temperature=float("inf"), seed=1),
    SamplingParams(temperature=1.0, top_p=1e-300, seed=1),
    SamplingParams(temperature=1.0, top_p=0.0, seed=1),
    SamplingParams(temperature=0.5, top_k=2**31 - 1, seed=2**63 - 1),
], ids=lambda p: f"T={p.temperature},p={p.top_p},k={p.top_k}")
def test_extreme_parameters_never_give_nan_nor_fail_the_batch(params: SamplingParams) -> None:
    logits = torch.tensor([[3e4, -3e4, float("-inf"), 0.0], [1.0, 2.0, 3.0, 4.0]])
    probs = filtered_probs(logits[0], params)
    assert torch.isfinite(probs).all() and probs.sum().item() == pytest.approx(1.0)
    tokens = sample(logits, [params, SamplingParams(temperature=1.0, seed=7)], [5, 5])
    assert tokens[0] in (0, 1, 3) and 0 <= tokens[1] < 4  # never the -inf token


def test_temperatures_below_epsilon_are_greedy() -> None:
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(1))
    ps = [SamplingParams(temperature=t, seed=3) for t in (0.0, 1e-300, 9.9e-6, float("nan"))]
    assert all(p.greedy for p in ps) and not SamplingParams(temperature=1e-5).greedy
    assert sample(logits, ps, [0, 1, 2, 3]) == logits.argmax(-1).tolist()


def test_pool_pages_truncate_and_all_or_nothing() -> None:
    layout = KVLayout(num_layers=2, num_kv_heads=1, head_dim=4, dtype=torch.float32)
    pool = KVPool(layout, num_tokens=40, page_size=8, device=torch.device("cpu"))  # 5 pages
    assert pool.capacity == 40 and layout.bytes_per_token == 2 * 2 * 1 * 4 * 4
    slots = pool.alloc("a", 10)
    assert len(set(slots)) == 10 and pool.page_table("a") == [0, 1] and pool.tokens_free() == 30
    assert pool.alloc("a", 6) == [slots[-1] + i for i in range(1, 7)]  # fills page 1's tail first
    pool.truncate("a", 3)
    assert pool.page_table("a") == [0] and pool.seq_len("a") == 3 and pool.tokens_free() == 37
    with pytest.raises(CapacityError, match="5 pages of 8 tokens but only 4"):
        pool.alloc("b", 33)
    assert "b" not in pool and pool.tokens_free() == 37
    pool.free("a")
    pool.free("unknown")
    assert pool.tokens_free() == 40 and pool.tokens_used() == 0
    pool.alloc("b", 2)
    with pytest.raises(ValueError, match="cannot truncate"):
        pool.truncate("b", 5)
    assert pool_tokens(layout, torch.device("cpu"), 100, kv_bytes=64 * 10) == 10
    assert pool_tokens(layout, torch.device("cpu"), 100, mem_fraction=0.5) == 100  # fraction: CUDA only


def test_banned_ids_are_never_sampled_and_the_logits_stay_untouched() -> None:
    logits = torch.stack([LOGITS, LOGITS])
    seeded = SamplingParams(temperature=1.0, seed=3)
    for pos in range(20):
        assert sample(logits, [SamplingParams(), seeded], [pos, pos], [(0,), (0, 1)]) [0] == 1
        assert sample(logits, [SamplingParams(), seeded], [pos, pos], [(0,), (0, 1)])[1] in (2, 3)
    assert torch.equal(logits[0], LOGITS)  # routers see the model's own scores
    assert sample(logits[:1], [SamplingParams()], [0], [(0, 1, 2, 3)]) == [0]  # never every token
