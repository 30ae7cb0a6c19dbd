"""The Markov chain: closed forms, conservation, feasibility, and the long-run distribution's corner cases."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.errors import UserError
from tokenrouter.perfmodel import InfeasibleThresholds, SystemSpec, preset, throughput
from tokenrouter.perfmodel.chain import Chain, build_chain, long_run_distribution


def r2r(p: float, lat=(6.0, 27.9), quantum: float = 0.1) -> SystemSpec:
    route, commit = preset("r2r", route_prob=p)
    return SystemSpec.build(route, commit, list(lat), quantum)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_one_model_serves_n_over_l(n: int) -> None:
    spec = SystemSpec.build([[1.0]], [[1.0]], [8.0], 0.5)
    assert throughput(spec, n, [1]).throughput_tok_s == pytest.approx(n / 8.0 * 1000)
    assert throughput(spec, n, [n]).throughput_tok_s == pytest.approx(n / 8.0 * 1000)


def test_one_model_batch_dependent_latency() -> None:
    prof = LatencyProfile(table=((1, 4.0), (4, 10.0)))  # 4 ms at b=1, 10 ms at b=4, linear between
    spec = SystemSpec.build([[1.0]], [[1.0]], [prof], 0.5)
    assert throughput(spec, 4, [1]).throughput_tok_s == pytest.approx(4 / 10.0 * 1000)
    assert throughput(spec, 2, [1]).throughput_tok_s == pytest.approx(2 / 6.0 * 1000)


@pytest.mark.parametrize(("n", "b0"), [(4, 1), (4, 4), (6, 3)])
def test_no_routing_keeps_all_work_on_model_zero(n: int, b0: int) -> None:
    res = throughput(r2r(0.0), n, [b0, 1])
    assert res.throughput_tok_s == pytest.approx(n / 6.0 * 1000)
    assert res.step_rate[1] == 0.0
    assert res.mean_batch[0] == pytest.approx(n)


def test_periodic_alternation_matches_closed_form() -> None:
    # Always hand off, large always returns: one request alternates 6 ms + 27.9 ms per committed token.
    spec = r2r(1.0)
    assert throughput(spec, 1, [1, 1]).throughput_tok_s == pytest.approx(1000 / 33.9)
    # Two requests in lock-step: the cycle is still 33.9 ms, now with 2 tokens.
    assert throughput(spec, 2, [1, 1]).throughput_tok_s == pytest.approx(2000 / 33.9)


@pytest.mark.parametrize(("n", "thr"), [(3, [1, 2]), (5, [2, 3]), (6, [1, 1])])
def test_requests_and_tokens_are_conserved(n: int, thr: list[int]) -> None:
    p = 0.3
    spec = r2r(p, lat=(5.0, 17.0), quantum=0.5)
    chain = build_chain(spec, n, thr)
    m = chain.num_models
    assert (chain.states[:, : 2 * m].sum(axis=1) == n).all()  # every state holds exactly N requests
    rows = np.asarray(chain.transitions.sum(axis=1)).ravel()
    assert np.allclose(rows, 1.0)
    res = throughput(spec, n, thr)
    # flow balance: request-steps entering model 1 = p x steps on model 0; every large step returns one token
    assert res.step_rate[1] == pytest.approx(p * res.step_rate[0], rel=1e-9)
    assert res.throughput_tok_s == pytest.approx((1 - p) * res.step_rate[0] + res.step_rate[1], rel=1e-9)


@pytest.mark.parametrize(("n", "thr"), [(4, [3, 3]), (2, [1, 3]), (4, [2, 2, 3])])
def test_infeasible_thresholds_are_rejected_with_deadlock_and_a_fix(n: int, thr: list[int]) -> None:
    route, commit = preset("ensemble", weights=[1] * len(thr))
    spec = SystemSpec.build(route, commit, [5.0] * len(thr), 1.0)
    with pytest.raises(InfeasibleThresholds, match=r"deadlock.*sum\(B_i - 1\) <= " + str(n - 1)):
        throughput(spec, n, thr)


@pytest.mark.parametrize(
    ("route", "lat", "match"),
    [
        ([[0.5, 0.6], [1, 0]], [1, 2], "sum to 1"),
        ([[1, 0], [1, 0]], [1], "one row and one latency"),
        ([[1, 0, 0], [1, 0]], [1, 2], "square"),
        ([[1, 0], [1, 0]], [1, 0], "positive"),
    ],
)
def test_bad_system_inputs_name_the_problem(route, lat, match) -> None:
    with pytest.raises(UserError, match=match):
        SystemSpec.build(route, [[1, 0], [1, 0]], lat, 0.1)


def test_transient_states_get_no_weight_and_closed_classes_are_weighted() -> None:
    # 0 -> {1 (p=.25), 2 (p=.75)}; 1 and 2 absorbing: long run = absorption probabilities.
    mat = sp.csr_matrix(np.array([[0, 0.25, 0.75], [0, 1, 0], [0, 0, 1]]))
    chain = Chain(states=np.zeros((3, 3), dtype=np.int64), transitions=mat, start=0, num_models=1)
    assert long_run_distribution(chain) == pytest.approx([0, 0.25, 0.75])
    # a periodic class behind a transient state: 0 -> 1 <-> 2
    mat = sp.csr_matrix(np.array([[0, 1.0, 0], [0, 0, 1.0], [0, 1.0, 0]]))
    chain = Chain(states=np.zeros((3, 3), dtype=np.int64), transitions=mat, start=0, num_models=1)
    assert long_run_distribution(chain) == pytest.approx([0, 0.5, 0.5])


def test_paper_validation_setting_is_small_and_prefers_delayed_large_batches() -> None:
    spec = r2r(0.35)
    by_b1 = {b: throughput(spec, 4, [1, b]) for b in range(1, 5)}
    assert max(by_b1, key=lambda b: by_b1[b].throughput_tok_s) == 3
    assert all(res.num_states < 1000 for res in by_b1.values())
