"""Threshold search, the B*(N) table, auto thresholds with their disk cache, presets."""

from __future__ import annotations

import json

import pytest

from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.errors import UserError
from tokenrouter.perfmodel import (
    SystemSpec,
    auto_thresholds,
    optimize,
    optimize_table,
    preset,
    preset_for_algorithm,
    throughput,
)
from tokenrouter.perfmodel.optimize import count_feasible, feasible_thresholds


def r2r_spec(quantum: float = 0.1) -> SystemSpec:
    route, commit = preset("r2r", route_prob=0.35)
    return SystemSpec.build(route, commit, [6.0, 27.9], quantum)


@pytest.mark.parametrize(("n", "m"), [(1, 2), (5, 2), (4, 3)])
def test_feasible_set_is_exactly_sum_below_n(n: int, m: int) -> None:
    points = list(feasible_thresholds(n, m))
    assert len(points) == count_feasible(n, m) == len(set(points))
    assert all(sum(b) - m < n for b in points)
    assert (1,) * (m - 1) + (n,) in points and (1,) * (m - 1) + (n + 1,) not in points


def test_exhaustive_search_returns_the_argmax() -> None:
    spec = r2r_spec()
    res = optimize(spec, 4)
    assert res.exhaustive and len(res.evaluated) == count_feasible(4, 2)
    brute = max(feasible_thresholds(4, 2), key=lambda b: throughput(spec, 4, b).throughput_tok_s)
    assert res.best.thresholds == brute == (1, 3)


def test_screened_search_says_so_and_finds_the_exhaustive_best() -> None:
    spec = r2r_spec(0.5)
    full = optimize(spec, 10)
    screened = optimize(spec, 10, max_exhaustive=5)
    assert full.exhaustive and not screened.exhaustive
    assert screened.screen_quantum_ms is not None
    assert len(screened.evaluated) < len(full.evaluated)
    assert screened.best.thresholds == full.best.thresholds


def test_fixed_threshold_and_table() -> None:
    table = optimize_table(r2r_spec(), 4, fixed={0: 1})
    assert {n: res.best.thresholds for n, res in table.items()} == {
        1: (1, 1),
        2: (1, 2),
        3: (1, 2),
        4: (1, 3),
    }
    assert all(e.thresholds[0] == 1 for res in table.values() for e in res.evaluated)
    with pytest.raises(UserError, match="nothing to optimize"):
        optimize(r2r_spec(), 4, fixed={0: 1, 1: 2})
    with pytest.raises(UserError, match="no feasible"):
        optimize(r2r_spec(), 2, fixed={0: 3})


def test_auto_thresholds_are_cached_on_disk(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TOKENROUTER_CACHE", str(tmp_path))
    route, commit = preset("bernoulli", route_prob=0.35)
    lat = [LatencyProfile.constant(6.0), LatencyProfile.constant(27.9)]
    table = auto_thresholds(route, commit, lat, 6)
    assert sorted(table) == list(range(1, 7))
    spec = SystemSpec.build(route, commit, lat, None, max_concurrency=6)
    assert table == {n: list(res.best.thresholds) for n, res in optimize_table(spec, 6).items()}
    files = list((tmp_path / "perfmodel").glob("*.json"))
    assert len(files) == 1
    files[0].write_text(json.dumps({"1": [1, 1], "2": [9, 9]}))  # a cache hit must return the file's content
    assert auto_thresholds(route, commit, lat, 6)[2] == [9, 9]
    assert auto_thresholds(route, commit, lat, 5) != table  # other inputs, other key


def test_auto_thresholds_use_the_step_times_at_the_given_context(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TOKENROUTER_CACHE", str(tmp_path))
    route, commit = preset("bernoulli", route_prob=0.35)
    table = ((1, 27.9), (8, 30.0))
    large = LatencyProfile(table=table, by_context=((256, table), (8192, ((1, 30.0), (8, 120.0)))))
    small = LatencyProfile.constant(6.0)
    long = auto_thresholds(route, commit, [small, large], 6, context_tokens=8192)
    assert long == auto_thresholds(route, commit, [small, large.at_context(8192)], 6)
    assert long != auto_thresholds(route, commit, [small, large], 6) == auto_thresholds(
        route, commit, [small, large], 6, context_tokens=100)  # clamped to the base context


def test_presets_and_algorithm_params() -> None:
    assert preset("citer", route_prob=0.2) == ([[0.8, 0.2], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]])
    assert preset_for_algorithm("bernoulli", {"route_prob": 0.35}) == preset("r2r", route_prob=0.35)
    route, commit = preset("rstitch", route_prob=0.1, p10=0.6)
    assert route == [[0.9, 0.1], [0.6, 0.4]] and commit == [[1.0, 1.0], [1.0, 1.0]]
    route, _ = preset_for_algorithm("ensemble", {"weights": [5, 3, 2]})
    assert route[2] == pytest.approx([0.5, 0.3, 0.2])
    with pytest.raises(UserError, match="route_prob"):
        preset_for_algorithm("r2r", {"threshold": 0.4})
    with pytest.raises(UserError, match="no throughput-model preset"):
        preset_for_algorithm("nope", {})
    with pytest.raises(UserError, match=r"\[0, 1\]"):
        preset("r2r", route_prob=1.5)


def test_lockstep_closed_forms_and_the_delayed_batching_gain() -> None:
    from tokenrouter.perfmodel.lockstep import lockstep_throughput

    assert lockstep_throughput(r2r_spec(), 1) == pytest.approx(1000 / (6.0 + 0.35 * 27.9))
    route, commit = preset("r2r", route_prob=0.0)
    assert lockstep_throughput(SystemSpec.build(route, commit, [6.0, 27.9], 0.1), 4) == pytest.approx(
        4000 / 6.0
    )
    # N = 4 in lock step: a small step, then a large step unless no row was routed (prob 0.65^4).
    expected = 4000 / (6.0 + 27.9 * (1 - 0.65**4))
    assert lockstep_throughput(r2r_spec(), 4) == pytest.approx(expected)
    assert throughput(r2r_spec(), 4, [1, 3]).throughput_tok_s / expected == pytest.approx(1.5, abs=0.05)
    with pytest.raises(UserError, match="one-token return"):
        lockstep_throughput(SystemSpec.build(*preset("rstitch", route_prob=0.1, p10=0.5), [1, 2], 0.1), 2)
