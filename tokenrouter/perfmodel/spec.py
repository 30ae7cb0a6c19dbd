"""Inputs of the throughput model: M models, routing matrix P, commit matrix C, step latencies, time quantum.

A request that finishes a decoding step on model i moves to model j with probability P[i][j] and commits
C[i][j] output tokens (R2R: a small step that hands off commits nothing, the large model regenerates it).
Latencies are `LatencyProfile`s, so a step may cost L_i(b) for a batch of b requests. The chain counts time
in quanta of `quantum_ms`: d_i(b) = round(L_i(b) / quantum), at least 1 quantum.

A step also extends the tokens its rows committed elsewhere since their last step here (the peer's tokens a
hand-off carries): on average e_i of them per row (`catch_up_tokens`), each at the profile's `per_token_ms`,
so L_i(b) = decode_i(b) + b e_i per_token_ms_i. Why: on a CPU (or a large model's prefill) they are not free,
and a model that batches more rows pays them per row, which thresholds planned on decode alone over-batch.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.errors import UserError

# The automatic quantum keeps the slowest step at this many quanta: state spaces stay small (their size grows
# about linearly with the quanta per step) while rounding moves any latency by at most 1/(2 * quanta).
AUTO_MAX_QUANTA = 200


class InfeasibleThresholds(UserError):
    """Thresholds under which every queue can stall below its threshold at once (deadlock)."""


@dataclass(frozen=True)
class SystemSpec:
    """The idealized system the chain and the simulator share (everything but N and the thresholds)."""

    route: tuple[tuple[float, ...], ...]
    commit: tuple[tuple[float, ...], ...]
    latencies: tuple[LatencyProfile, ...]
    quantum_ms: float
    extend_tokens: tuple[float, ...] = ()  # e_i: tokens a row extends on model i beyond its one decode token

    @classmethod
    def build(
        cls,
        route: Sequence[Sequence[float]],
        commit: Sequence[Sequence[float]],
        latencies: Sequence[LatencyProfile | float],
        quantum_ms: float | None = None,
        max_concurrency: int = 1,
    ) -> SystemSpec:
        """Validate the inputs once; `quantum_ms=None` picks `auto_quantum` for batches up to `max_concurrency`."""
        profiles = tuple(
            p if isinstance(p, LatencyProfile) else LatencyProfile.constant(float(p)) for p in latencies
        )
        p_mat = _matrix(route, "route matrix")
        c_mat = _matrix(commit, "commit matrix")
        m = len(p_mat)
        if len(c_mat) != m or len(profiles) != m:
            raise UserError(
                f"route matrix has {m} rows but commit matrix has {len(c_mat)} and there are "
                f"{len(profiles)} latencies: give one row and one latency per model"
            )
        for i, row in enumerate(p_mat):
            if any(x < 0 for x in row) or not math.isclose(sum(row), 1.0, abs_tol=1e-6):
                raise UserError(f"route matrix row {i} must be non-negative and sum to 1, got {list(row)}")
        if any(x < 0 for row in c_mat for x in row):
            raise UserError("commit matrix entries must be non-negative")
        for i, prof in enumerate(profiles):
            if not prof.decode_ms(1) > 0:
                raise UserError(f"model {i}: step latency must be positive, got {prof.decode_ms(1)} ms")
        p_norm = tuple(tuple(x / sum(row) for x in row) for row in p_mat)
        spec = cls(route=p_norm, commit=c_mat, latencies=profiles, quantum_ms=1.0,
                   extend_tokens=catch_up_tokens(p_norm, c_mat))
        if quantum_ms is None:
            quantum_ms = spec.auto_quantum(max_concurrency)
        if not quantum_ms > 0:
            raise UserError(f"quantum must be positive, got {quantum_ms} ms")
        return replace(spec, quantum_ms=float(quantum_ms))

    @property
    def num_models(self) -> int:
        return len(self.route)

    def latency_ms(self, model: int, batch: int) -> float:
        """L_i(b): a step of `batch` rows, each decoding one token and extending e_i caught-up ones."""
        profile = self.latencies[model]
        extend = self.extend_tokens[model] * batch * profile.per_token_ms if self.extend_tokens else 0.0
        return profile.decode_ms(batch) + extend

    def auto_quantum(self, max_batch: int = 1) -> float:
        """The quantum that makes the slowest step (up to `max_batch`) exactly AUTO_MAX_QUANTA quanta."""
        slowest = max(self.latency_ms(i, b) for i in range(self.num_models) for b in range(1, max(1, max_batch) + 1))
        return slowest / AUTO_MAX_QUANTA

    def step_quanta(self, n: int) -> np.ndarray:
        """d[i, b]: quanta of a step of b requests on model i, for b = 0..n (d[i, 0] unused, 0)."""
        d = np.zeros((self.num_models, n + 1), dtype=np.int64)
        for i in range(self.num_models):
            for b in range(1, n + 1):
                d[i, b] = max(1, round(self.latency_ms(i, b) / self.quantum_ms))
        return d

    def reward_per_step(self) -> np.ndarray:
        """Expected tokens a request commits per step on model i: sum_j P[i][j] C[i][j]."""
        return (np.array(self.route) * np.array(self.commit)).sum(axis=1)

    def key(self, n: int) -> str:
        """Stable digest of everything the chain sees for batches up to n (for the on-disk cache)."""
        payload = {
            "route": self.route,
            "commit": self.commit,
            "quantum_ms": self.quantum_ms,
            "latency_ms": [[self.latency_ms(i, b) for b in range(1, n + 1)] for i in range(self.num_models)],
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def catch_up_tokens(route: Sequence[Sequence[float]], commit: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """e_i for each model: the tokens committed on other models per request-step on model i, i.e.
    (sum_{j != i} pi_j r_j) / pi_i, with pi the long-run share of a request's steps on each model (from model 0,
    the entry model: a reducible or periodic route matrix is averaged over its first steps) and r_j the tokens
    a step on j commits. Every token committed elsewhere is extended on i when the request next steps there."""
    p = np.array(route, dtype=float)
    m = len(p)
    share, visit = np.zeros(m), np.eye(m)[0]
    for _ in range(STATIONARY_STEPS):  # Cesaro average: defined for every route matrix
        share += visit
        visit = visit @ p
    share /= STATIONARY_STEPS
    tokens = share * (p * np.array(commit, dtype=float)).sum(axis=1)
    return tuple(float((tokens.sum() - tokens[i]) / share[i]) if share[i] > 1e-12 else 0.0 for i in range(m))


STATIONARY_STEPS = 4096


def check_thresholds(thresholds: Sequence[int], n: int, num_models: int) -> tuple[int, ...]:
    """Validate B for N requests: one positive integer per model and sum(B_i - 1) < N (else deadlock)."""
    b = tuple(int(x) for x in thresholds)
    if len(b) != num_models:
        raise UserError(f"need one threshold per model ({num_models}), got {len(b)}: {list(b)}")
    if n < 1:
        raise UserError(f"concurrency must be at least 1, got {n}")
    if any(x < 1 for x in b):
        raise UserError(f"thresholds must be >= 1, got {list(b)}")
    slack = sum(x - 1 for x in b)
    if slack >= n:
        raise InfeasibleThresholds(
            f"thresholds {list(b)} are infeasible for N={n}: sum(B_i - 1) = {slack} >= N, so every queue can hold "
            f"fewer requests than its threshold at once and no batch ever launches (deadlock); feasible "
            f"thresholds need sum(B_i - 1) <= {n - 1}, e.g. {list(feasible_example(b, n))}"
        )
    return b


def feasible_example(b: Sequence[int], n: int) -> tuple[int, ...]:
    """The given thresholds lowered from the last model backwards until sum(B_i - 1) < n."""
    out = list(b)
    excess = sum(x - 1 for x in out) - (n - 1)
    for i in reversed(range(len(out))):
        cut = min(excess, out[i] - 1)
        out[i] -= cut
        excess -= cut
    return tuple(out)


def _matrix(rows: Sequence[Sequence[float]], what: str) -> tuple[tuple[float, ...], ...]:
    try:
        mat = tuple(tuple(float(x) for x in row) for row in rows)
    except (TypeError, ValueError):
        raise UserError(f"{what}: expected rows of numbers") from None
    m = len(mat)
    if m == 0 or any(len(row) != m for row in mat):
        raise UserError(
            f"{what} must be square (one row and one column per model), got {[len(r) for r in mat]}"
        )
    return mat
