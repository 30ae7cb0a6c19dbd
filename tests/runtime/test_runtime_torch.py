"""The runtime on real tiny transformer models (tiny-random small/large, greedy): never-routed requests give
the small model's own output, always-routed ones the large model's (every token crosses a hand-off and an
extend, so the KV catch-up is exact), and mixed routing is identical across runs and concurrency levels.
One front end serves all three through a per-request-probability Bernoulli (tests/runtime/user_algorithms/seeded.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine import profiling
from tokenrouter.engine.profiling import profile_at_startup
from tokenrouter.engine.torch_engine import TorchEngine
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest
from tokenrouter.runtime.threshold_planner import auto_table, plan_launch_rules
from tokenrouter.runtime.thresholds import make_feasible

from .conftest import Frontends, greedy_reference, user_algorithms_importable

SMALL = ModelSpec(name="small", source="tiny-random:small", kv_tokens=4096)
LARGE = ModelSpec(name="large", source="tiny-random:large", kv_tokens=4096)
PROMPTS = [[5, 17, 33, 40], [2, 9, 40, 41, 7, 3, 88, 12, 13], [60, 61, 62], [44, 8, 19, 90, 1, 30]]
NEW = 12
PROFILED = [replace(SMALL, latency_profile="auto"), replace(LARGE, latency_profile="auto")]
BERNOULLI = AlgorithmSpec("bernoulli", {"route_prob": 0.35})
NEVER, ALWAYS, MIXED = 0, 1, 2  # seed % 3 -> route probability 0, 1, 0.35 (user_algorithms/seeded.py)


def _reqs(kind: int) -> list[GenerationRequest]:
    # no stop ids: a random model may emit EOS early; fixed lengths keep the comparison strict
    return [GenerationRequest(p, max_new_tokens=NEW, seed=3 * i + kind, index=i, stop_token_ids=[])
            for i, p in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def fes():
    with user_algorithms_importable():
        f = Frontends({
            "seeded": ([SMALL, LARGE], AlgorithmSpec("user_algorithms.seeded"),
                       RuntimeConfig(thresholds=[1, 2], max_wait_ms=10.0)),
            "profiled": (PROFILED, BERNOULLI, RuntimeConfig(thresholds="auto", auto_max_concurrency=8)),
            "optimal": (PROFILED, BERNOULLI, RuntimeConfig(thresholds=[1, 2], policy="optimal", auto_max_concurrency=8)),
        })
    yield f
    f.close()


@pytest.fixture(scope="module")
def references() -> dict[str, list[list[int]]]:
    refs = {}
    for spec in (SMALL, LARGE):
        engine = TorchEngine.from_spec(spec)
        engine.eos_token_ids = ()  # match the runtime requests: no early stop
        refs[spec.name] = [greedy_reference(engine, p, NEW) for p in PROMPTS]
    assert refs["small"] != refs["large"]
    return refs


def test_outputs_equal_each_models_own_greedy_output_when_routing_is_fixed(fes, references) -> None:
    fe = fes.fe["seeded"]
    results = fes.run(fe.generate_many(_reqs(NEVER) + _reqs(ALWAYS)))
    never, always = results[: len(PROMPTS)], results[len(PROMPTS):]
    assert [r.output_ids for r in never] == references["small"]
    assert all(r.tokens_per_model == {"small": NEW, "large": 0} for r in never)
    assert [r.output_ids for r in always] == references["large"]
    assert all(r.tokens_per_model == {"small": 0, "large": NEW} and r.handoffs == 2 * NEW - 1 for r in always)


def test_mixed_routing_identical_across_runs_and_concurrency(fes, references) -> None:
    fe = fes.fe["seeded"]
    together = [r.output_ids for r in fes.run(fe.generate_many(_reqs(MIXED)))]
    crowded = [r.output_ids for r in fes.run(fe.generate_many(_reqs(MIXED) + _reqs(ALWAYS)))][: len(PROMPTS)]
    one_by_one = [fes.run(fe.generate(r)).output_ids for r in _reqs(MIXED)]
    assert together == crowded == one_by_one
    assert together != references["small"] and together != references["large"]


def test_latency_profile_auto_measures_at_startup_and_sets_the_thresholds(fes) -> None:
    fe = fes.fe["profiled"]
    profiles = fe.stats()["latency_profiles"]
    assert set(profiles) == {"small", "large"}
    for p in profiles.values():
        assert list(p["decode_ms"]) == ["1", "2", "4", "8"] and all(ms > 0 for ms in p["decode_ms"].values())
    expected = auto_table(PROFILED, BERNOULLI, 8, [profiles["small"], profiles["large"]])
    assert expected is not None  # the throughput model ran on the measured latencies
    assert [fe.thresholds(n) for n in range(1, 9)] == [make_feasible(expected[n], n) for n in range(1, 9)]
    results = fes.run(fe.generate_many(_reqs(MIXED)))
    assert all(len(r.output_ids) == NEW for r in results)


def test_policy_optimal_with_explicit_thresholds_plans_on_startup_profiles(fes) -> None:
    """runtime.policy=optimal plans from the same inputs as thresholds=auto, whatever the thresholds: with them
    explicit, the front end still has the latency_profile=auto models profiled at start-up (it decides, once:
    threshold_planner.startup_profiles) and launches on the optimal rules, not on plain thresholds."""
    fe = fes.fe["optimal"]
    profiles = fe.stats()["latency_profiles"]
    assert set(profiles) == {"small", "large"}
    rules, why = plan_launch_rules(PROFILED, BERNOULLI, 8, [profiles["small"], profiles["large"]])
    assert rules is not None and "throughput model" in why
    assert fe.launch_rules == rules and fe.thresholds_source == "fixed"
    results = fes.run(fe.generate_many(_reqs(MIXED)))
    assert all(len(r.output_ids) == NEW for r in results)


def test_startup_profile_is_cached(tmp_path, monkeypatch) -> None:
    engine = TorchEngine.from_spec(SMALL)
    fields = PROFILED[0].to_dict()
    first = profile_at_startup(engine, [fields], 0, 2, tmp_path)
    monkeypatch.setattr(profiling, "measure", lambda *a, **k: pytest.fail("measured again despite the cache"))
    assert profile_at_startup(engine, [fields], 0, 2, tmp_path) == first and len(list(tmp_path.glob("*.json"))) == 1
    assert engine.tokens_used() == 0  # profiling leaves the KV pool empty
    tiny = TorchEngine.from_spec(replace(SMALL, kv_tokens=64))
    with pytest.raises(UserError, match="latency_profile auto needs"):
        profile_at_startup(tiny, [{**fields, "kv_tokens": 64}], 0, 2, tmp_path)
