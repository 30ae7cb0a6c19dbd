"""Profiles over (context, batch size): every context measured on a real tiny engine, contexts the pool or
the model cannot hold left out (and said so), a time budget, a cache key that names the device's other
models; start-up profiles time CUDA work on the engine's own device."""

from __future__ import annotations

import json

import pytest
import torch

from tokenrouter.config import ModelSpec
from tokenrouter.engine import profiling
from tokenrouter.engine.base import StepItem, StepOutput
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.engine.profiling import (
    ContextPlan,
    Measured,
    kv_needed,
    measure,
    plan_contexts,
    profile_at_startup,
    profile_dict,
    steps_at,
)
from tokenrouter.engine.torch_engine import TorchEngine


class _OnGpu1:
    device = torch.device("cuda:1")

    def step(self, items: list[StepItem]) -> StepOutput:
        return StepOutput(rids=[it.rid for it in items], next_tokens=[0] * len(items))


def test_timed_step_synchronizes_the_engines_device(monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    assert profiling._timed_step(_OnGpu1(), [StepItem("r", [1])]) >= 0.0  # type: ignore[arg-type]
    assert synced == [torch.device("cuda:1")] * 2  # never a bare synchronize() (GPU 0's context)


SMALL = ModelSpec(name="small", source="tiny-random:small", kv_tokens=2048)


@pytest.fixture(scope="module")
def engine() -> TorchEngine:
    eng = TorchEngine.from_spec(SMALL)
    yield eng
    eng.close()


def test_measure_profiles_every_context_and_leaves_the_pool_empty(engine) -> None:
    measured = measure(engine, [1, 2, 4], [256, 32], steps=4, extend_tokens=8)
    assert list(measured.decode_ms_by_context) == [32, 256] and measured.context == 32
    assert all(list(t) == ["1", "2", "4"] and all(ms > 0 for ms in t.values())
               for t in measured.decode_ms_by_context.values())
    assert measured.decode_ms == measured.decode_ms_by_context[32] and measured.skipped == {}
    assert engine.tokens_used() == 0
    profile = profile_dict("small", "cpu", "float32", measured)
    prof = LatencyProfile.from_dict(json.loads(json.dumps(profile)), "test")
    assert prof.decode_ms(2) == measured.decode_ms["2"] and [c for c, _ in prof.by_context] == [32, 256]


def test_a_spent_time_budget_leaves_the_longer_contexts_out(engine) -> None:
    measured = measure(engine, [1], [32, 64], steps=2, extend_tokens=8, budget_s=0.0)
    assert list(measured.decode_ms_by_context) == [32]
    assert measured.skipped == {64: "over the profiling time budget of 0 s"}


def test_fewer_steps_at_longer_contexts() -> None:
    assert [steps_at(10, c, 256) for c in (256, 512, 2048, 8192)] == [10, 5, 3, 3]
    assert steps_at(2, 8192, 256) == 2


def test_contexts_the_pool_or_the_positions_cannot_hold_are_skipped_and_capped() -> None:
    need = kv_needed([1, 16], 2048, 10, 64, 16)
    plan = plan_contexts([256, 2048, 8192], [1, 16], 10, 64, need + 100, 16, None)
    assert plan.contexts[:2] == [256, 2048] and 2048 < plan.contexts[2] < 8192
    assert kv_needed([1, 16], plan.contexts[2], 10, 64, 16) <= need + 100 < kv_needed([1, 16], plan.contexts[2] + 1,
                                                                                      10, 64, 16)
    assert list(plan.skipped) == [8192] and "KV pool" in plan.skipped[8192]
    plan = plan_contexts([256, 2048, 8192], [1], 10, 64, 10**6, 16, 4096)
    assert plan.contexts == [256, 2048, 4096 - 2 - 64] and "4096 positions" in plan.skipped[8192]
    assert plan_contexts([256], [1], 10, 64, 10**6, 16, None) == ContextPlan([256])


def _fake_measure(calls: list[int]):
    def fake(engine, sizes, contexts, steps, extend, budget_s=None):
        calls.append(1)
        return Measured({c: {"1": 1.0} for c in contexts}, 0.0)
    return fake


def test_the_cache_key_says_which_models_share_the_device(tmp_path, monkeypatch, engine) -> None:
    calls: list[int] = []
    monkeypatch.setattr(profiling, "measure", _fake_measure(calls))
    small, large = SMALL.to_dict(), {**SMALL.to_dict(), "name": "large", "source": "tiny-random:large"}
    alone = [small, {**large, "device": "cuda:1"}]
    shared = [small, large]
    assert profiling.sharing_members(alone, 0) == [] and profiling.sharing_members(shared, 0) == [
        ["large", "tiny-random:large"]]
    first = profile_at_startup(engine, alone, 0, 2, tmp_path)
    assert profile_at_startup(engine, alone, 0, 2, tmp_path) == first and len(calls) == 1  # cached
    profile_at_startup(engine, shared, 0, 2, tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("*.json"))) == 2
    # a TP 2 job of the same model is not a TP 1 one (every engine: its steps are sharded and synchronised)
    profile_at_startup(engine, [{**small, "tp": 2}, alone[1]], 0, 2, tmp_path)
    assert len(calls) == 3 and len(list(tmp_path.glob("*.json"))) == 3
    # a 2048-token pool cannot hold batch 2 at 2048 or 8192: the longest context it can is measured instead
    assert set(first["contexts_skipped"]) == {"2048", "8192"}
    base, cap = (int(c) for c in first["decode_ms_by_context"])
    assert base == 256 < cap < 2048 and first["context"] == 256
