"""The event simulator agrees with the chain within 2% on a grid (M = 2 and 3), and replays traces."""

from __future__ import annotations

import random

import pytest

from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.errors import UserError
from tokenrouter.perfmodel import SystemSpec, preset, simulate, throughput

GRID_2 = [  # (preset args, latencies ms, quantum, N, thresholds)
    (("r2r", 0.35, None), (6.0, 27.9), 0.1, 2, [1, 2]),
    (("r2r", 0.35, None), (6.0, 27.9), 0.1, 4, [1, 3]),
    (("r2r", 0.1, None), (4.0, 20.0), 0.5, 6, [1, 1]),
    (("r2r", 0.5, None), (3.0, 9.0), 0.5, 8, [2, 4]),
    (("rstitch", 0.2, 0.4), (5.0, 15.0), 0.5, 5, [1, 2]),
]
GRID_3 = [
    ([0.5, 0.3, 0.2], (2.0, 5.0, 9.0), 0.5, 4, [1, 1, 1]),
    ([0.5, 0.3, 0.2], (2.0, 5.0, 9.0), 0.5, 6, [2, 2, 1]),
    ([0.2, 0.3, 0.5], (3.0, 4.0, 11.0), 0.5, 5, [1, 2, 2]),
]


def _check(spec: SystemSpec, n: int, thr: list[int]) -> None:
    chain = throughput(spec, n, thr).throughput_tok_s
    sim = simulate(spec, n, thr, events=40_000, seed=7)
    assert sim.ci_low < sim.throughput_tok_s < sim.ci_high
    assert sim.throughput_tok_s == pytest.approx(chain, rel=0.02)


@pytest.mark.parametrize(("args", "lat", "quantum", "n", "thr"), GRID_2)
def test_chain_and_simulator_agree_for_two_models(args, lat, quantum, n, thr) -> None:
    name, p, p10 = args
    route, commit = preset(name, route_prob=p, p10=p10)
    _check(SystemSpec.build(route, commit, list(lat), quantum), n, thr)


@pytest.mark.parametrize(("weights", "lat", "quantum", "n", "thr"), GRID_3)
def test_chain_and_simulator_agree_for_three_models(weights, lat, quantum, n, thr) -> None:
    route, commit = preset("ensemble", weights=weights)
    _check(SystemSpec.build(route, commit, list(lat), quantum), n, thr)


def test_batch_dependent_latency_agrees() -> None:
    route, commit = preset("r2r", route_prob=0.3)
    lat = [LatencyProfile(base_ms=4.0, per_request_ms=0.5), LatencyProfile(base_ms=15.0, per_request_ms=1.0)]
    _check(SystemSpec.build(route, commit, lat, 0.5), 6, [1, 2])


def test_simulation_is_seeded() -> None:
    route, commit = preset("r2r", route_prob=0.35)
    spec = SystemSpec.build(route, commit, [6.0, 27.9], 0.1)
    a = simulate(spec, 4, [1, 3], events=5_000, seed=3)
    assert a == simulate(spec, 4, [1, 3], events=5_000, seed=3)
    assert a != simulate(spec, 4, [1, 3], events=5_000, seed=4)


def _geometric_trace(rng: random.Random, p: float, length: int) -> list[int]:
    """R2R's shape: a small step hands off with probability p, the large step returns."""
    trace, model = [], 0
    for _ in range(length):
        trace.append(model)
        model = 1 if model == 0 and rng.random() < p else 0
    return trace


def test_replayed_geometric_traces_match_the_chain() -> None:
    rng = random.Random(0)
    traces = [_geometric_trace(rng, 0.35, 400) for _ in range(200)]
    route, commit = preset("r2r", route_prob=0.35)
    spec = SystemSpec.build(route, commit, [6.0, 27.9], 0.1)
    chain = throughput(spec, 4, [1, 3]).throughput_tok_s
    sim = simulate(spec, 4, [1, 3], events=40_000, seed=1, traces=traces)
    assert sim.throughput_tok_s == pytest.approx(chain, rel=0.02)


def test_bursty_traces_differ_from_the_geometric_prediction() -> None:
    # Same hand-off share (1 in 3 steps on the large model) but in long runs: not what the chain assumes.
    bursty = [[0] * 20 + [1, 0] * 10 for _ in range(10)]
    route, commit = preset("r2r", route_prob=10 / 30)
    spec = SystemSpec.build(route, commit, [6.0, 27.9], 0.1)
    sim = simulate(spec, 4, [1, 3], events=20_000, seed=1, traces=bursty)
    chain = throughput(spec, 4, [1, 3]).throughput_tok_s
    assert abs(sim.throughput_tok_s - chain) / chain > 0.03


@pytest.mark.parametrize(
    ("traces", "match"), [([], "at least one"), ([[0, 2]], "out of range"), ([[0], []], "non-empty")]
)
def test_bad_traces_are_rejected(traces, match) -> None:
    route, commit = preset("r2r", route_prob=0.35)
    spec = SystemSpec.build(route, commit, [6.0, 27.9], 0.1)
    with pytest.raises(UserError, match=match):
        simulate(spec, 2, [1, 1], events=1_000, traces=traces)


def test_handoff_delay_matches_the_closed_form_at_n1() -> None:
    # one request: every small step commits one token (directly, or via one large step), and a hand-off costs
    # the large step plus two hops: 1 token per L0 + p (L1 + 2h)
    p, h = 0.35, 0.5
    spec = SystemSpec.build(*preset("r2r", route_prob=p), [6.0, 27.9], 0.1)
    res = simulate(spec, 1, [1, 1], events=40_000, seed=1, handoff_ms=h)
    assert res.ci_low < 1000 / (6.0 + p * (27.9 + 2 * h)) < res.ci_high
    assert res.throughput_tok_s < 1000 / (6.0 + p * 27.9)


def test_handoff_delay_costs_throughput_and_zero_changes_nothing() -> None:
    spec = SystemSpec.build(*preset("r2r", route_prob=0.35), [6.0, 27.9], 0.1)
    base = simulate(spec, 4, [1, 3], events=20_000, seed=2)
    assert simulate(spec, 4, [1, 3], events=20_000, seed=2, handoff_ms=0.0) == base
    slow = simulate(spec, 4, [1, 3], events=20_000, seed=2, handoff_ms=2.0)
    assert slow.events == base.events and slow.ci_high < base.ci_low
    with pytest.raises(UserError, match="handoff_ms"):
        simulate(spec, 4, [1, 3], handoff_ms=-1.0)
