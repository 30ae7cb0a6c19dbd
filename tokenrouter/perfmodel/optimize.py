"""Best delayed-batching thresholds B*(N), exhaustive where cheap, screened where not.

The feasible set {B >= 1 : sum(B_i - 1) < N} has C(N - 1 + M, M) points (136 for two models at N = 16,
2,080 at N = 64), and one chain costs ~ states ~ (quanta per step)^(M - 1). So:
- exhaustive: every feasible point at the requested quantum, when there are few points and states are small;
- otherwise screened: every feasible point (or a compass search when there are too many) at a coarse quantum
  (slowest step = SCREEN_QUANTA quanta), then the best `refine` candidates at the requested quantum and a
  +-1 local search around the winner there. The output says `exhaustive: false`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import product
from math import comb

from tokenrouter.errors import UserError
from tokenrouter.perfmodel.chain import throughput
from tokenrouter.perfmodel.spec import SystemSpec

MAX_EXHAUSTIVE = 150  # feasible points evaluated one by one at most
FULL_BUDGET = 2_000_000  # points x (slowest step in quanta)^(M-1) affordable at the requested quantum
SCREEN_QUANTA = 40  # the screening quantum makes the slowest step this many quanta


@dataclass(frozen=True)
class Evaluated:
    thresholds: tuple[int, ...]
    throughput_tok_s: float
    num_states: int

    def to_dict(self) -> dict:
        return {"thresholds": list(self.thresholds), "throughput_tok_s": self.throughput_tok_s}


@dataclass(frozen=True)
class OptimizeResult:
    n: int
    best: Evaluated
    evaluated: tuple[Evaluated, ...]
    exhaustive: bool
    screen_quantum_ms: float | None = None  # quantum of the screening pass (None: exhaustive, no screening)

    def to_dict(self) -> dict:
        return {
            "best": self.best.to_dict(),
            "evaluated": [e.to_dict() for e in self.evaluated],
            "exhaustive": self.exhaustive,
            "screen_quantum_ms": self.screen_quantum_ms,
        }


def feasible_thresholds(n: int, m: int, fixed: Mapping[int, int] | None = None) -> Iterator[tuple[int, ...]]:
    """Every B with B_i >= 1 and sum(B_i - 1) <= N - 1 (models in `fixed` held at their value)."""
    fixed = dict(fixed or {})
    ranges = [[fixed[i]] if i in fixed else range(1, n + 1) for i in range(m)]
    for b in product(*ranges):
        if sum(x - 1 for x in b) < n:
            yield b


def count_feasible(n: int, m: int, fixed: Mapping[int, int] | None = None) -> int:
    fixed = dict(fixed or {})
    budget = n - 1 - sum(v - 1 for v in fixed.values())
    free = m - len(fixed)
    return comb(budget + free, free) if budget >= 0 else 0


def optimize(
    spec: SystemSpec,
    n: int,
    *,
    fixed: Mapping[int, int] | None = None,
    start: tuple[int, ...] | None = None,
    max_exhaustive: int = MAX_EXHAUSTIVE,
    full_budget: int = FULL_BUDGET,
    refine: int = 3,
) -> OptimizeResult:
    """B*(N) maximizing the chain's predicted throughput (models in `fixed` keep their threshold)."""
    m = spec.num_models
    fixed = _check_fixed(fixed, n, m)
    evaluate, cache = _evaluator(spec, n)

    count = count_feasible(n, m, fixed)
    slowest = int(spec.step_quanta(n).max())
    exhaustive = count <= max_exhaustive and count * slowest ** (m - 1) <= full_budget
    screen_quantum = max(spec.quantum_ms, spec.quantum_ms * slowest / SCREEN_QUANTA)
    if exhaustive:
        for b in feasible_thresholds(n, m, fixed):
            evaluate(b)
    else:
        coarse = replace(spec, quantum_ms=screen_quantum)
        screened = _search(coarse, n, m, fixed, start, count <= max_exhaustive)
        for cand in sorted(screened, key=lambda e: -e.throughput_tok_s)[:refine]:
            evaluate(cand.thresholds)
        _compass(evaluate, n, m, fixed, [max(cache.values(), key=lambda e: e.throughput_tok_s).thresholds], 1)
    evaluated = tuple(sorted(cache.values(), key=lambda e: e.thresholds))
    best = max(evaluated, key=lambda e: (e.throughput_tok_s, [-x for x in e.thresholds]))
    return OptimizeResult(
        n=n,
        best=best,
        evaluated=evaluated,
        exhaustive=exhaustive,
        screen_quantum_ms=None if exhaustive else screen_quantum,
    )


def optimize_table(
    spec: SystemSpec,
    max_n: int,
    *,
    fixed: Mapping[int, int] | None = None,
    max_exhaustive: int = MAX_EXHAUSTIVE,
    full_budget: int = FULL_BUDGET,
) -> dict[int, OptimizeResult]:
    """B*(N) for N = 1..max_n, each search warm-started from B*(N - 1)."""
    if max_n < 1:
        raise UserError(f"max concurrency must be at least 1, got {max_n}")
    fixed = dict(fixed or {})
    table: dict[int, OptimizeResult] = {}
    start = None
    for n in range(1, max_n + 1):
        held = {i: v for i, v in fixed.items() if count_feasible(n, spec.num_models, {i: v})}
        table[n] = optimize(
            spec, n, fixed=held, start=start, max_exhaustive=max_exhaustive, full_budget=full_budget
        )
        start = table[n].best.thresholds
    return table


def _evaluator(
    spec: SystemSpec, n: int
) -> tuple[Callable[[tuple[int, ...]], Evaluated], dict[tuple[int, ...], Evaluated]]:
    """A memoized chain evaluation for fixed spec and N, and the memo it fills."""
    cache: dict[tuple[int, ...], Evaluated] = {}

    def evaluate(b: tuple[int, ...]) -> Evaluated:
        if b not in cache:
            res = throughput(spec, n, b)
            cache[b] = Evaluated(b, res.throughput_tok_s, res.num_states)
        return cache[b]

    return evaluate, cache


def _search(
    spec: SystemSpec, n: int, m: int, fixed: Mapping[int, int], start: tuple[int, ...] | None, every: bool
) -> list[Evaluated]:
    """Screening pass: every feasible point, or a compass search from all ones and from `start`."""
    evaluate, cache = _evaluator(spec, n)

    if every:
        for b in feasible_thresholds(n, m, fixed):
            evaluate(b)
    else:
        seeds = [tuple(fixed.get(i, 1) for i in range(m))]
        if start is not None and len(start) == m:
            seeds.append(tuple(fixed.get(i, x) for i, x in enumerate(start)))
        _compass(evaluate, n, m, fixed, seeds, max(1, n // 4))
    return list(cache.values())


def _compass(
    evaluate: Callable[[tuple[int, ...]], Evaluated],
    n: int,
    m: int,
    fixed: Mapping[int, int],
    seeds: list[tuple[int, ...]],
    step: int,
) -> None:
    """Coordinate moves of size `step` on each free threshold, keeping the best; halve the step when none improves."""
    free = [i for i in range(m) if i not in fixed]

    def feasible(b: tuple[int, ...]) -> bool:
        return all(x >= 1 for x in b) and sum(x - 1 for x in b) < n

    best = max((evaluate(s) for s in seeds if feasible(s)), key=lambda e: e.throughput_tok_s)
    while step >= 1:
        moved = False
        for i, sign in product(free, (1, -1)):
            cand = list(best.thresholds)
            cand[i] += sign * step
            if feasible(tuple(cand)):
                res = evaluate(tuple(cand))
                if res.throughput_tok_s > best.throughput_tok_s * (1 + 1e-9):
                    best, moved = res, True
        if not moved:
            step //= 2


def _check_fixed(fixed: Mapping[int, int] | None, n: int, m: int) -> dict[int, int]:
    if n < 1:
        raise UserError(f"concurrency must be at least 1, got {n}")
    out = {int(i): int(v) for i, v in (fixed or {}).items()}
    for i, v in out.items():
        if not 0 <= i < m:
            raise UserError(f"cannot fix the threshold of model {i}: there are {m} models (0..{m - 1})")
        if v < 1:
            raise UserError(f"fixed threshold of model {i} must be >= 1, got {v}")
    if len(out) == m:
        raise UserError("every threshold is fixed: nothing to optimize (use `throughput` instead)")
    if count_feasible(n, m, out) == 0:
        raise UserError(
            f"fixed thresholds {out} leave no feasible thresholds for N={n}: need sum(B_i - 1) < N"
        )
    return out
