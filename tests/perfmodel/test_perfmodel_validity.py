"""Validity of the model for a run: geometric fit and drift of per-model runs, and their replay as step traces."""

from __future__ import annotations

import numpy as np
import pytest

from tokenrouter.errors import UserError
from tokenrouter.perfmodel import SystemSpec, preset, simulate, throughput
from tokenrouter.perfmodel.validity import geometric_fit, model_validity, request_runs, step_traces

NAMES = ["small", "large"]


def r2r_rows(p: float, requests: int, tokens: int, seed: int = 0, drift: float = 0.0) -> list[dict]:
    """R2R's committed-token trace: every token is the large model's with probability p, independently (a
    small step hands off with p; the large commits one token and returns). `drift` moves p linearly over the run."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(requests):
        q = p + drift * (r / max(1, requests - 1) - 0.5)
        runs: list[list] = []
        for model in np.where(rng.random(tokens) < q, "large", "small"):
            if runs and runs[-1][0] == model:
                runs[-1][1] += 1
            else:
                runs.append([str(model), 1])
        rows.append({"model_runs": runs})
    return rows


def test_geometric_runs_fit_and_bursty_runs_do_not() -> None:
    rng = np.random.default_rng(1)
    for p in (0.35, 0.05):
        mean, dispersion, _, dof, pval = geometric_fit(rng.geometric(p, 3000).astype(float))
        assert mean == pytest.approx(1 / p, rel=0.05) and dispersion == pytest.approx(1.0, abs=0.1)
        assert dof >= 2 and pval > 0.001
    bursty = np.concatenate([rng.geometric(0.6, 1500), rng.geometric(0.1, 1500)]).astype(float)
    _, dispersion, _, _, pval = geometric_fit(bursty)
    assert dispersion > 1.5 and pval < 1e-6


def test_a_geometric_run_is_in_the_regime_and_a_drifting_one_is_not() -> None:
    ok = model_validity(r2r_rows(0.35, 60, 150), NAMES)
    assert ok is not None and ok["in_regime"] is True
    small = ok["models"][0]
    assert small["mean_run"] == pytest.approx(1 / 0.35, rel=0.1) and len(small["window_rates"]) == 4
    drifting = model_validity(r2r_rows(0.35, 60, 150, drift=0.4), NAMES)
    assert drifting is not None and drifting["in_regime"] is False and drifting["models"][0]["drift"] > 0.25
    assert model_validity([{"tokens": 3}], NAMES) is None  # no traces recorded


def test_censored_last_runs_are_left_out() -> None:
    rows = [{"model_runs": [["small", 3], ["large", 1], ["small", 40]]}]
    fits = model_validity(rows, NAMES)["models"]
    assert fits[0]["runs"] == 1 and fits[0]["mean_run"] == 3 and fits[0]["in_regime"] is None  # too few runs


def test_step_traces_restore_the_silent_hand_off_steps() -> None:
    route, commit = preset("r2r", route_prob=0.35)
    runs = request_runs([{"model_runs": [["small", 2], ["large", 2], ["small", 1]]}], NAMES)
    # small, small, small (hands off, commits nothing), large, small (silent), large, small
    assert step_traces(runs, route, commit) == [[0, 0, 0, 1, 0, 1, 0]]
    ens_route, ens_commit = preset("ensemble", weights=[0.5, 0.5])
    assert step_traces(runs, ens_route, ens_commit) == [[0, 0, 1, 1, 0]]  # every step commits
    with pytest.raises(UserError, match="model_runs"):
        request_runs([{"model_runs": [["mid", 1]]}], NAMES)


def test_replayed_geometric_traces_match_the_chain_at_their_rate() -> None:
    route, commit = preset("r2r", route_prob=0.35)
    traces = step_traces(request_runs(r2r_rows(0.35, 200, 100), NAMES), route, commit)
    large = sum(t.count(1) for t in traces)
    p_hat = large / (sum(map(len, traces)) - large)  # hand-offs per small step in this sample
    spec = SystemSpec.build(*preset("r2r", route_prob=p_hat), [6.0, 27.9], 0.1)
    replay = simulate(spec, 4, [1, 3], traces=traces, events=40_000)
    assert replay.throughput_tok_s == pytest.approx(throughput(spec, 4, [1, 3]).throughput_tok_s, rel=0.015)
