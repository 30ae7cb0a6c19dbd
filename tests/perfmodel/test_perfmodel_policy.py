"""The optimal launch policy: brute force over every deterministic policy, thresholds reproduce the chain."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from tokenrouter.errors import UserError
from tokenrouter.perfmodel import SystemSpec, optimize, preset, simulate, throughput
from tokenrouter.perfmodel.policy import build_problem, evaluate, launch_policy, solve, threshold_launch

SMALL = [  # (preset, its rates, latencies in quanta, N): few enough policies to try them all
    ("r2r", {"route_prob": 0.35}, [1, 3], 2),
    ("r2r", {"route_prob": 0.35}, [1, 3], 3),
    ("rstitch", {"route_prob": 0.3, "p10": 0.5}, [1, 3], 3),
    ("ensemble", {"weights": [0.5, 0.3, 0.2]}, [1, 2, 3], 2),
]


def system(name: str, rates: dict, lat: list[float], quantum: float = 1.0) -> SystemSpec:
    return SystemSpec.build(*preset(name, **rates), lat, quantum)


@pytest.mark.parametrize(("name", "rates", "lat", "n"), SMALL)
def test_policy_iteration_finds_the_best_of_every_deterministic_policy(name, rates, lat, n) -> None:
    spec = system(name, rates, lat)
    problem = build_problem(spec, n)
    first = problem.first_action
    counts = np.bincount(problem.act_pre, minlength=len(problem.pre))
    best = max(evaluate(problem, first + np.array(offsets))[0] for offsets in product(*(range(c) for c in counts)))
    assert solve(spec, n, problem=problem).gain == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize(("n", "thr"), [(2, [1, 2]), (4, [1, 3]), (5, [2, 3])])
def test_threshold_policies_reproduce_the_chain(n: int, thr: list[int]) -> None:
    spec = system("r2r", {"route_prob": 0.35}, [6.0, 27.9], 0.5)
    problem = build_problem(spec, n)
    gain, _ = evaluate(problem, threshold_launch(problem, thr))
    chain = throughput(spec, n, thr).throughput_tok_s
    assert gain * 1000 / spec.quantum_ms == pytest.approx(chain, rel=1e-8)


def test_three_model_thresholds_reproduce_the_chain() -> None:
    spec = system("ensemble", {"weights": [0.5, 0.3, 0.2]}, [2, 4, 7])
    problem = build_problem(spec, 4)
    gain, _ = evaluate(problem, threshold_launch(problem, [1, 2, 2]))
    assert gain * 1000 == pytest.approx(throughput(spec, 4, [1, 2, 2]).throughput_tok_s, rel=1e-8)


def test_optimal_is_at_least_the_best_thresholds_and_beats_them_at_the_validation_setting() -> None:
    spec = SystemSpec.build(*preset("r2r", route_prob=0.35), [6.0, 27.9], None, max_concurrency=4)
    best = optimize(spec, 4).best
    opt = solve(spec, 4, best.thresholds)
    assert opt.throughput_tok_s > best.throughput_tok_s * 1.001  # ~0.3% (208.6 vs 208.0 tok/s)


def test_no_policy_can_leave_every_model_idle() -> None:
    problem = build_problem(system("r2r", {"route_prob": 0.35}, [1, 3]), 3)
    running = problem.post[:, 2:4] > 0
    assert running.any(axis=1).all()
    with pytest.raises(UserError, match="deadlock"):
        threshold_launch(problem, [3, 3])


def test_one_model_optimum_is_the_closed_form() -> None:
    spec = SystemSpec.build([[1.0]], [[1.0]], [8.0], 0.5)
    assert solve(spec, 3).throughput_tok_s == pytest.approx(3 / 8.0 * 1000)


def test_the_event_simulator_under_the_optimal_policy_confirms_its_gain() -> None:
    spec = system("ensemble", {"weights": [0.5, 0.3, 0.2]}, [6.0, 15.0, 28.0], 2.0)
    opt = solve(spec, 3)
    sim = simulate(spec, 3, [1, 1, 1], quantized=True, events=60_000, policy=launch_policy(opt))
    assert sim.ci_low * 0.995 <= opt.throughput_tok_s <= sim.ci_high * 1.005
    thresholds = simulate(spec, 3, [1, 1, 1], quantized=True, events=60_000)
    assert sim.throughput_tok_s > thresholds.ci_high  # the gain (~2%) is outside the simulator's noise


def test_the_policy_lookup_names_states_it_does_not_know() -> None:
    decide = launch_policy(solve(system("r2r", {"route_prob": 0.35}, [1, 3]), 2))
    assert decide((2, 0), (0, 0), (0.0, 0.0)) == [True, False]
    with pytest.raises(UserError, match="quantized=True"):
        decide((1, 0), (0, 1), (0.0, 7.0))  # 7 quanta left of a 3-quantum step: off the problem's grid
