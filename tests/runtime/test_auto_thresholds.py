"""`runtime.thresholds=auto` beyond sim engines: torch models get step latencies from a `latency_profile` JSON,
the routing rate from the algorithm's `rates()` (a learned router's saved held-out route rate), and a bad
profile path is one clear error. auto_table is a plain function: no subserver is started."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tokenrouter.algorithms.checkpoints import save_router
from tokenrouter.algorithms.routers import build_router
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest
from tokenrouter.perfmodel import auto_thresholds, preset_for_algorithm
from tokenrouter.runtime.frontend import TokenRouterFrontend
from tokenrouter.runtime.threshold_planner import (
    auto_table,
    model_latency,
    plan_thresholds,
    startup_profiles,
    workload_context,
)

MAX_N = 6


def _profile(path: Path, decode_ms: dict[int, float]) -> str:
    path.write_text(json.dumps({"model": path.stem, "device": "cpu", "dtype": "float32", "context": 64,
                                "decode_ms": {str(b): ms for b, ms in decode_ms.items()},
                                "extend_ms_per_token": 0.01}))
    return str(path)


@pytest.fixture
def profiles(tmp_path) -> tuple[str, str]:
    return (_profile(tmp_path / "small.json", {1: 2.0, 4: 2.2, 16: 3.0}),
            _profile(tmp_path / "large.json", {1: 10.0, 4: 10.5, 16: 13.0}))


def _torch_pair(small: str | None, large: str | None) -> list[ModelSpec]:
    return [ModelSpec(name="small", source="tiny-random:small", latency_profile=small),
            ModelSpec(name="large", source="tiny-random:large", latency_profile=large)]


def test_torch_models_with_profiles_get_the_sim_table(profiles) -> None:
    algo = AlgorithmSpec("bernoulli", {"route_prob": 0.3})
    sim = [ModelSpec(name=n, engine="sim", sim=SimSpec(profile=p)) for n, p in zip(("small", "large"), profiles, strict=True)]
    table = auto_table(_torch_pair(*profiles), algo, MAX_N)
    assert table is not None and sorted(table) == list(range(1, MAX_N + 1))
    assert table == auto_table(sim, algo, MAX_N)
    assert table[MAX_N][1] > 1  # the large model waits for a fuller batch at high concurrency
    # a sim engine's latency_profile wins over its SimSpec
    assert model_latency(ModelSpec(name="s", engine="sim", latency_profile=profiles[1])).decode_ms(1) == 10.0


def test_bernoullis_default_rate_is_used(profiles) -> None:
    default = auto_table(_torch_pair(*profiles), AlgorithmSpec("bernoulli"), MAX_N)
    assert default == auto_table(_torch_pair(*profiles), AlgorithmSpec("bernoulli", {"route_prob": 0.35}), MAX_N)


def test_a_learned_router_s_saved_route_rate_sets_the_table(profiles, tmp_path) -> None:
    net = build_router("co_llm", {"hidden_states_size": 8, "hidden_dims": []})
    save_router(net, tmp_path / "router" / "router", 0.5, {"metrics": {"heldout_route_rate": 0.2}})
    algo = AlgorithmSpec("co_llm", {"router": str(tmp_path / "router")})
    table = auto_table(_torch_pair(*profiles), algo, MAX_N)
    lats = [model_latency(m) for m in _torch_pair(*profiles)]
    assert table == auto_thresholds(*preset_for_algorithm("co_llm", {"route_prob": 0.2}), lats, MAX_N)
    assert table != auto_thresholds(*preset_for_algorithm("co_llm", {"route_prob": 0.5}), lats, MAX_N)
    # trained at another threshold: no known rate, all ones
    assert auto_table(_torch_pair(*profiles), AlgorithmSpec("co_llm", {**algo.params, "eta": 0.9}), MAX_N) is None


def test_torch_models_without_a_profile_fall_back_with_a_hint(profiles, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="tokenrouter.runtime.threshold_planner"):
        assert auto_table(_torch_pair(profiles[0], None), AlgorithmSpec("bernoulli"), MAX_N) is None
    assert "['large']" in caplog.text and "latency_profile" in caplog.text


def test_a_missing_or_bad_profile_is_a_one_line_error(tmp_path) -> None:
    with pytest.raises(UserError, match="latency profile not found") as err:
        auto_table(_torch_pair(str(tmp_path / "nope.json"), None), AlgorithmSpec("bernoulli"), MAX_N)
    assert "\n" not in str(err.value)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="not a `tokenrouter profile` JSON"):
        auto_table(_torch_pair(str(tmp_path / "bad.json"), None), AlgorithmSpec("bernoulli"), MAX_N)


def test_auto_context_tokens_picks_the_step_times_at_that_context(tmp_path) -> None:
    # the large model's step grows with batch at 8k tokens of KV per request (memory-bound): batching pays less
    by_context = {"256": {"1": 10.0, "4": 10.5, "16": 13.0}, "8192": {"1": 12.0, "4": 30.0, "16": 100.0}}
    large = tmp_path / "large.json"
    large.write_text(json.dumps({"context": 256, "decode_ms": by_context["256"], "decode_ms_by_context": by_context,
                                 "extend_ms_per_token": 0.01}))
    small = _profile(tmp_path / "small.json", {1: 2.0, 4: 2.2, 16: 3.0})
    models, algo = _torch_pair(small, str(large)), AlgorithmSpec("bernoulli", {"route_prob": 0.3})
    base = auto_table(models, algo, MAX_N)
    assert auto_table(models, algo, MAX_N, context_tokens=256) == base  # 256: the base context, as None
    long = auto_table(models, algo, MAX_N, context_tokens=8192)
    assert long is not None and long != base and long[MAX_N][1] < base[MAX_N][1]
    lats = [model_latency(m).at_context(8192) for m in models]
    assert long == auto_thresholds(*preset_for_algorithm("bernoulli", {"route_prob": 0.3}), lats, MAX_N)
    _, why = plan_thresholds(models, algo, MAX_N, context_tokens=8192)
    assert why.endswith("step times at context 8192")


def test_the_workload_sets_the_context_and_a_bad_one_is_a_one_line_error() -> None:
    assert workload_context([100, 300], [8192, 8192]) == 200 + 4096
    fe = TokenRouterFrontend([ModelSpec(name=n, engine="sim") for n in ("a", "b")], AlgorithmSpec("bernoulli"))
    fe.calibrate([GenerationRequest(prompt_ids=[1] * 10, max_new_tokens=20)], ["x"])
    assert fe.runtime.auto_context_tokens == 20
    fixed = TokenRouterFrontend(fe.models, fe.algorithm, RuntimeConfig(auto_context_tokens=512))
    fixed.calibrate([GenerationRequest(prompt_ids=[1] * 10, max_new_tokens=20)], ["x"])
    assert fixed.runtime.auto_context_tokens == 512  # configured: the workload does not override it
    with pytest.raises(UserError, match="auto_context_tokens must be null or an integer >= 1") as err:
        RuntimeConfig.from_dict({"auto_context_tokens": 0})
    assert "\n" not in str(err.value)


def test_the_front_end_decides_which_subservers_profile_at_startup() -> None:
    """One decision, made by the front end and sent to each subserver as a fact: a `latency_profile: auto` model
    is profiled when thresholds=auto or policy=optimal plans on the latencies (delayed batching on, 2+ models)."""
    models = [ModelSpec(name="s", engine="sim", latency_profile="auto"), ModelSpec(name="l", engine="sim")]
    assert startup_profiles(models, RuntimeConfig()) == [True, False]
    assert startup_profiles(models, RuntimeConfig(thresholds=[1, 2])) == [False, False]
    assert startup_profiles(models, RuntimeConfig(thresholds=[1, 2], policy="optimal")) == [True, False]
    assert startup_profiles(models, RuntimeConfig(delayed_batching=False, policy="optimal")) == [False, False]
    assert startup_profiles(models[:1], RuntimeConfig()) == [False]
