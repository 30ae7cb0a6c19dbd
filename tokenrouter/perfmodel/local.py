"""The best launch rule a subserver can run: a function of what it observes, searched on the chain.

What a subserver knows when it decides (runtime/subserver.py): that it is idle, its own ready count k (plus the
requests waiting for KV here), and N from the front end's `Active` broadcasts. It does not know the other
models' queues, whether they run, or when their batches finish: nothing carries that to it. So the policies it
can run are per-model rules go[i, k] for the current N (launch the whole queue of k iff go[i, k]). Thresholds
are the monotone ones (go[i, k] = k >= B_i); the question this module answers is whether a non-monotone rule
(e.g. launch at 1 or at 3 but wait at 2) beats them, and by how much.

A rule is live iff whenever every model is idle (all N requests queued, in any split) some queue launches:
otherwise that split deadlocks. Search: every live rule when there are few (2^(M N) candidates, minus the dead
ones); otherwise a steepest-ascent search over single flips of go[i, k] from the best thresholds, so the
result is never below them. Each candidate is one chain (chain.build_rule_chain).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from tokenrouter.perfmodel.chain import build_rule_chain, chain_throughput, threshold_rule
from tokenrouter.perfmodel.spec import SystemSpec

MAX_EXHAUSTIVE_BITS = 12  # every rule is tried when M * N bits (2^bits candidates) are at most this


@dataclass(frozen=True)
class LocalRule:
    """go[i][k] for k = 0..N: model i, idle with k requests queued, launches them iff go[i][k]."""

    go: tuple[tuple[bool, ...], ...]
    throughput_tok_s: float

    @property
    def masks(self) -> list[int]:
        """Per model, the bitmask of queue lengths that launch (bit k: k queued), the runtime's wire form."""
        return [sum(1 << k for k, g in enumerate(row) if g) for row in self.go]

    def thresholds(self) -> list[int] | None:
        """The thresholds this rule equals, or None when some model's rule is not monotone."""
        out = []
        for row in self.go:
            first = row.index(True) if True in row else len(row)
            if not all(row[first:]):
                return None
            out.append(first)
        return out


@dataclass(frozen=True)
class LocalResult:
    n: int
    best: LocalRule
    best_thresholds: LocalRule
    evaluated: int
    exhaustive: bool


def splits(n: int, m: int) -> np.ndarray:
    """Every way to split n queued requests over m queues, (count, m)."""
    rows = [c for c in product(range(n + 1), repeat=m - 1) if sum(c) <= n]
    return np.array([[*c, n - sum(c)] for c in rows], dtype=np.int64)


def is_live(go: np.ndarray, n: int) -> bool:
    """Whether every all-idle split of the N requests has a model whose rule launches."""
    k = splits(n, go.shape[0])
    return bool(go[np.arange(go.shape[0])[None, :], k].any(axis=1).all())


def rule_value(spec: SystemSpec, n: int, go: np.ndarray) -> float:
    return chain_throughput(spec, build_rule_chain(spec, n, go)).throughput_tok_s


def best_local_rule(spec: SystemSpec, n: int, thresholds: Sequence[int],
                    max_exhaustive_bits: int = MAX_EXHAUSTIVE_BITS) -> LocalResult:
    """The best live rule go[i, k] for N, against the given (best) thresholds."""
    m = spec.num_models
    cache: dict[bytes, float] = {}

    def value(go: np.ndarray) -> float:
        key = go.tobytes()
        if key not in cache:
            cache[key] = rule_value(spec, n, go)
        return cache[key]

    start = threshold_rule(thresholds, n)
    exhaustive = m * n <= max_exhaustive_bits
    candidates = _every_rule(n, m) if exhaustive else _ascend(start, value, n)
    best, best_v = start, value(start)
    for go in candidates:
        if is_live(go, n) and value(go) > best_v * (1 + 1e-9):
            best, best_v = go, value(go)
    return LocalResult(n, _rule(best, best_v), _rule(start, value(start)), len(cache), exhaustive)


def _rule(go: np.ndarray, v: float) -> LocalRule:
    return LocalRule(tuple(tuple(bool(x) for x in row) for row in go), v)


def _every_rule(n: int, m: int) -> Iterator[np.ndarray]:
    for bits in product((False, True), repeat=m * n):
        go = np.zeros((m, n + 1), dtype=bool)
        go[:, 1:] = np.array(bits).reshape(m, n)
        yield go


def _ascend(start: np.ndarray, value: Callable[[np.ndarray], float], n: int) -> Iterator[np.ndarray]:
    """Steepest ascent over single flips of go[i, k] (k >= 1), keeping only live rules."""
    best, best_v = start, value(start)
    while True:
        moved = False
        for i, k in product(range(start.shape[0]), range(1, n + 1)):
            cand = best.copy()
            cand[i, k] = not cand[i, k]
            if is_live(cand, n) and value(cand) > best_v * (1 + 1e-9):
                best, best_v, moved = cand, value(cand), True
        yield best
        if not moved:
            return
