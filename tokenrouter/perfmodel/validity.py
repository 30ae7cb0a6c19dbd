"""Is a run in the regime the throughput model assumes? Geometric run lengths and stationary rates, per model.

The chain assumes a request leaves model i after each step with a fixed probability, independent of its
history. Then the number of consecutive output tokens one model commits (a run) is geometric on {1, 2, ...}, and
its mean stays put over the run. requests.jsonl's `model_runs` (which model committed each output token,
run-length encoded: [[model, tokens], ...]) give the runs; each request's last run is cut short by the request's
end (censored), so it is left out.

Per model: the geometric fit at the maximum-likelihood mean (chi-square over run-length bins, tail pooled, with
its p-value), the dispersion index var / (mean (mean - 1)) (1 for geometric; > 1: bursty, runs longer and
shorter than a geometric with that mean), and the drift of the leave rate 1 / mean run over `windows` equal
slices of the requests in finish order. With thousands of runs the chi-square rejects deviations too small to
move throughput, so the verdict uses the dispersion and drift bounds below; the p-value is reported beside them.

`step_traces` turns the runs back into the model of every step, which `simulate(traces=...)` replays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from tokenrouter.errors import UserError

DISPERSION_BOUNDS = (0.8, 1.25)  # geometric within sampling noise at a few hundred runs; beyond: bursty/regular
MAX_DRIFT = 0.25  # leave-rate spread across windows; 25% moves B*(N) by at most one step in the settings we swept
MIN_RUNS = 30  # fewer complete runs than this: no verdict for that model
MIN_EXPECTED = 5  # chi-square bins hold at least about this many expected runs
MAX_BINS = 20


@dataclass(frozen=True)
class ModelFit:
    model: str
    runs: int  # complete (uncensored) runs
    mean_run: float
    dispersion: float | None  # var / (mean (mean - 1)); None when every run has length 1
    chi2: float
    dof: int
    p_value: float | None
    window_rates: list[float]  # leave rate 1 / mean run per window
    drift: float | None  # (max - min) / overall leave rate
    in_regime: bool | None  # None: too few runs to tell


def request_runs(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> list[list[tuple[int, int]]]:
    """Per request row with `model_runs`, its runs as (model index, tokens); rows without the key are skipped."""
    index = {name: i for i, name in enumerate(names)}
    out = []
    for row in rows:
        runs = row.get("model_runs")
        if runs is None:
            continue
        try:
            out.append([(index[str(m)], int(n)) for m, n in runs if int(n) > 0])
        except (KeyError, TypeError, ValueError):
            raise UserError(f"model_runs {runs!r}: expected [[model, tokens], ...] with models in {list(names)}") from None
    return out


def geometric_fit(lengths: np.ndarray) -> tuple[float, float | None, float, int, float | None]:
    """(mean, dispersion, chi-square, degrees of freedom, p-value) of run lengths >= 1 against the geometric
    distribution with the same mean. Bins are the geometric's quantiles (up to MAX_BINS, each expecting at least
    MIN_EXPECTED runs), so long mean runs (p = 0.05: ~20 tokens) get as fair a test as short ones."""
    n, mean = len(lengths), float(lengths.mean())
    if mean <= 1.0 or n < 2:
        return mean, None, 0.0, 0, None
    stay = 1.0 - 1.0 / mean
    dispersion = float(lengths.var(ddof=1) / (mean * (mean - 1.0)))
    bins = int(min(MAX_BINS, n // MIN_EXPECTED))
    quantiles = np.arange(1, bins) / bins
    lows = np.unique(np.concatenate([[1], np.ceil(np.log1p(-quantiles) / np.log(stay)).astype(int) + 1]))
    at_least = stay ** (lows - 1.0)  # P(run >= low) of each bin [low, next low)
    expected = n * (at_least - np.append(at_least[1:], 0.0))
    observed = np.bincount(np.searchsorted(lows, lengths, side="right") - 1, minlength=len(lows))
    dof = len(lows) - 2  # the bins' total and the fitted mean
    if dof < 1:
        return mean, dispersion, 0.0, 0, None
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    return mean, dispersion, chi2, dof, float(stats.chi2.sf(chi2, dof))


def model_validity(rows: Sequence[dict[str, Any]], names: Sequence[str], windows: int = 4) -> dict[str, Any] | None:
    """summary.json's `model_validity`: per-model fits and whether the run was in the model's regime (None when
    no row carries `model_runs`)."""
    per_request = request_runs(rows, names)
    if not per_request:
        return None
    fits = []
    for i, name in enumerate(names):
        complete = [[n for m, n in runs[:-1] if m == i] for runs in per_request]  # the last run is censored
        lengths = np.array([n for req in complete for n in req], dtype=float)
        if len(lengths) == 0:
            fits.append(ModelFit(name, 0, 0.0, None, 0.0, 0, None, [], None, None))
            continue
        mean, dispersion, chi2, dof, p = geometric_fit(lengths)
        rates = []
        for part in np.array_split(np.arange(len(complete)), min(windows, len(complete))):
            runs = [n for j in part for n in complete[j]]
            rates.append(len(runs) / sum(runs) if runs else float("nan"))
        finite = [r for r in rates if np.isfinite(r)]
        drift = (max(finite) - min(finite)) * mean if finite else None
        ok = None
        if len(lengths) >= MIN_RUNS:
            lo, hi = DISPERSION_BOUNDS
            ok = (dispersion is None or lo <= dispersion <= hi) and (drift is None or drift <= MAX_DRIFT)
        fits.append(ModelFit(name, len(lengths), mean, dispersion, chi2, dof, p, rates, drift, ok))
    verdicts = [f.in_regime for f in fits if f.in_regime is not None]
    return {"in_regime": all(verdicts) if verdicts else None, "models": [asdict(f) for f in fits],
            "dispersion_bounds": list(DISPERSION_BOUNDS), "max_drift": MAX_DRIFT}


def step_traces(per_request: Sequence[Sequence[tuple[int, int]]], route: Sequence[Sequence[float]],
                commit: Sequence[Sequence[float]]) -> list[list[int]]:
    """The model of every step of each request, from which model committed each token. A step that hands off
    without committing (C[i][j] = 0: R2R's small model) is put back before the token it handed off to; two
    tokens in a row from a model that never keeps a request (P[i][i] = 0) had one such silent step between them,
    on the model that hands back without committing. Requests start at model 0."""
    m = len(route)
    silent_via = {}
    for a in range(m):
        if route[a][a] == 0:
            via = [c for c in range(m) if c != a and route[a][c] > 0 and commit[c][a] == 0]
            if len(via) == 1:
                silent_via[a] = via[0]
    traces = []
    for runs in per_request:
        steps: list[int] = []
        prev = 0
        for model, count in runs:
            for _ in range(count):
                if model != prev and commit[prev][model] == 0:
                    steps.append(prev)
                elif model == prev and route[model][model] == 0 and steps:
                    if model not in silent_via:
                        raise UserError(f"model {model} committed twice in a row but never keeps a request, and "
                                        "no single model hands back to it without committing")
                    steps.append(silent_via[model])
                steps.append(model)
                prev = model
        if steps:
            traces.append(steps)
    return traces
