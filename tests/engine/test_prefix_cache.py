"""The prefix cache in front of an engine: reuse is exact (same tokens, logits as without it), bounded, and
never in the way of capacity."""

from __future__ import annotations

import pytest
import torch

from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import StepItem
from tokenrouter.engine.factory import build_engine
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.engine.prefix_cache import PrefixCachingEngine, _common_prefix
from tokenrouter.engine.sim import SimEngine


def _sim(kv_tokens: int = 4096) -> SimEngine:
    return SimEngine("s", LatencyProfile.constant(0.0), vocab_size=100, kv_tokens=kv_tokens)


def _one_token_at_a_time(engine, prompt: list[int], n: int, rid_prefix: str) -> list[int]:
    """Std.-Serving style: a fresh request per token with the whole prefix resent, released after one step."""
    seq = list(prompt)
    for i in range(n):
        rid = f"{rid_prefix}{i}"
        seq.append(engine.step([StepItem(rid, list(seq))]).next_tokens[0])
        engine.release(rid)
    return seq[len(prompt):]


def test_common_prefix() -> None:
    assert _common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert _common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert _common_prefix([5], [1]) == 0
    assert _common_prefix(list(range(1000)), [*range(517), -1]) == 517


def test_resent_prefixes_only_extend_and_give_the_same_tokens() -> None:
    plain, cached = _sim(), PrefixCachingEngine(_sim(), budget_tokens=1000)
    prompt = [3, 4, 5, 6, 7]
    assert _one_token_at_a_time(cached, prompt, 20, "c") == _one_token_at_a_time(plain, prompt, 20, "p")
    assert cached.stats.hits == 19 and cached.stats.lookups == 20
    assert cached.stats.hit_tokens == sum(len(prompt) + i for i in range(19))  # all but the new token reused
    assert cached.tokens_used() == 0 and cached.inner.tokens_used() == len(prompt) + 19  # kept as cache only


def test_partial_match_truncates_and_budget_evicts() -> None:
    eng = PrefixCachingEngine(_sim(), budget_tokens=10)
    eng.step([StepItem("a", [1, 2, 3, 4, 5, 6])])
    eng.release("a")
    out = eng.step([StepItem("b", [1, 2, 3, 9])])  # shares 3 tokens with a's KV
    assert eng.stats.hit_tokens == 3 and eng.seq_len("b") == 4
    assert out.next_tokens == _sim().step([StepItem("x", [1, 2, 3, 9])]).next_tokens
    eng.release("b")
    eng.step([StepItem("c", [7] * 8)])
    eng.release("c")  # 4 + 8 > 10 tokens: b's entry goes
    assert eng.stats.evicted_tokens == 4 and eng.inner.tokens_used() == 8
    eng.step([StepItem("d", [8] * 11)])
    eng.release("d")  # larger than the whole budget: not cached at all
    assert eng.inner.tokens_used() == 8


def test_cache_gives_way_when_a_step_needs_the_room() -> None:
    eng = PrefixCachingEngine(_sim(kv_tokens=20), budget_tokens=20)
    eng.step([StepItem("a", list(range(1, 16)))])
    eng.release("a")
    assert eng.tokens_free() == 20 and eng.can_fit("b", 12)
    eng.step([StepItem("b", [50] * 12)])
    assert eng.seq_len("b") == 12 and eng.stats.evicted_tokens == 15


def test_torch_engine_logits_equal_with_and_without_cache() -> None:
    spec = ModelSpec(name="small", source="tiny-random:small", kv_tokens=2048)
    plain = build_engine(spec)
    cached = build_engine(ModelSpec(name="small", source="tiny-random:small", kv_tokens=2048, prefix_cache_tokens=512))
    assert isinstance(cached, PrefixCachingEngine)
    prompt = [5, 9, 12, 40, 41, 7]
    assert _one_token_at_a_time(cached, prompt, 12, "c") == _one_token_at_a_time(plain, prompt, 12, "p")
    seq = prompt + [11, 12]
    ref = plain.step([StepItem("r", seq)])
    got = cached.step([StepItem("q", seq)])
    assert cached.stats.hits >= 12
    torch.testing.assert_close(got.logits, ref.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got.hidden, ref.hidden, rtol=1e-4, atol=1e-4)


def test_negative_budget_is_a_user_error() -> None:
    from tokenrouter.errors import UserError

    with pytest.raises(UserError, match="prefix_cache_tokens"):
        ModelSpec(name="m", engine="sim", prefix_cache_tokens=-1)
