"""Seeded discrete-event simulator of the idealized delayed-batching system the chain models.

Same rules as the chain (launch the whole queue once it holds >= B_i requests, completions that coincide are
routed before any launch, start with all N requests at model 0), but in continuous time with the exact
latencies L_i(b), and with either of two routings:
- geometric: after a step on model i a request moves to j with probability P[i][j] (the chain's assumption);
- replayed traces: each request follows a recorded sequence of the models that ran its steps; when its trace
  ends, a new request takes its place with the next trace (closed loop). Run lengths are then whatever the
  traces hold, which the chain cannot represent: the simulator covers that case.
Committed tokens per step are C[i][j] (j = where the request goes next). Throughput comes with a 95%
confidence interval from batch means over equal numbers of events after a warm-up.

`handoff_ms` adds what the chain leaves out: a request moving to another model arrives there that much later
(IPC, wake-up, the receiving loop). It answers "what does the hand-off path cost at these step times" (on the
2-core development machine a hop is ~0.1-0.25 ms; across hosts over tcp://, more).
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
from scipy import stats

from tokenrouter.errors import UserError
from tokenrouter.perfmodel.spec import SystemSpec, check_thresholds

# (queue lengths, running batch sizes, ms left of each running batch) -> which idle models launch their queue
LaunchPolicy = Callable[[tuple[int, ...], tuple[int, ...], tuple[float, ...]], Sequence[bool]]


@dataclass(frozen=True)
class SimResult:
    throughput_tok_s: float
    ci_low: float
    ci_high: float
    events: int
    simulated_s: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2


class _Geometric:
    """Stationary independent routing: the chain's assumption."""

    def __init__(self, spec: SystemSpec, rng: random.Random) -> None:
        self.cum = [list(accumulate(row)) for row in spec.route]
        self.last = spec.num_models - 1
        self.rng = rng

    def first(self, slot: int) -> int:
        return 0

    def next(self, slot: int, model: int) -> int:
        return min(bisect_right(self.cum[model], self.rng.random()), self.last)


class _Replay:
    """Each request slot walks through recorded traces, taking the next (seeded-shuffled) trace when one ends."""

    def __init__(self, traces: Sequence[Sequence[int]], n: int, num_models: int, rng: random.Random) -> None:
        self.traces = validate_traces(traces, num_models)
        self.order = list(range(len(self.traces)))
        rng.shuffle(self.order)
        self.cursor = 0
        self.where = [(self._take(), 0) for _ in range(n)]  # slot -> (trace index, step index)

    def _take(self) -> int:
        trace = self.order[self.cursor % len(self.order)]
        self.cursor += 1
        return trace

    def first(self, slot: int) -> int:
        trace, pos = self.where[slot]
        return self.traces[trace][pos]

    def next(self, slot: int, model: int) -> int:
        trace, pos = self.where[slot]
        pos += 1
        if pos == len(self.traces[trace]):
            trace, pos = self._take(), 0
        self.where[slot] = (trace, pos)
        return self.traces[trace][pos]


def validate_traces(traces: Sequence[Sequence[int]], num_models: int) -> list[list[int]]:
    out = [[int(x) for x in t] for t in traces]
    if not out or any(not t for t in out):
        raise UserError("routing traces: need at least one non-empty trace")
    bad = sorted({x for t in out for x in t if not 0 <= x < num_models})
    if bad:
        raise UserError(f"routing traces: model indices {bad[:5]} out of range for {num_models} models")
    return out


def simulate(
    spec: SystemSpec,
    n: int,
    thresholds: Sequence[int],
    *,
    events: int = 100_000,
    seed: int = 0,
    traces: Sequence[Sequence[int]] | None = None,
    batches: int = 20,
    quantized: bool = False,
    handoff_ms: float = 0.0,
    policy: LaunchPolicy | None = None,
) -> SimResult:
    """Simulate `events` batch completions (the first 10% are warm-up); `quantized` rounds latencies like the
    chain; `handoff_ms` delays every request that changes model; `policy` replaces the thresholds' launch
    decision (e.g. policy.launch_policy of the optimal policy)."""
    m = spec.num_models
    thr = check_thresholds(thresholds, n, m)
    if not handoff_ms >= 0.0:
        raise UserError(f"handoff_ms must be >= 0, got {handoff_ms}")
    if events < 10 * batches or batches < 2:
        raise UserError(
            f"need batches >= 2 and events >= 10 * batches, got events={events}, batches={batches}"
        )
    rng = random.Random(seed)
    router = _Replay(traces, n, m, rng) if traces is not None else _Geometric(spec, rng)
    commit = spec.commit
    cache: dict[tuple[int, int], float] = {}

    def latency(i: int, b: int) -> float:
        if (i, b) not in cache:
            ms = spec.latency_ms(i, b)
            cache[i, b] = max(1, round(ms / spec.quantum_ms)) * spec.quantum_ms if quantized else ms
        return cache[i, b]

    queues: list[list[int]] = [[] for _ in range(m)]
    for slot in range(n):
        queues[router.first(slot)].append(slot)
    running: list[list[int]] = [[] for _ in range(m)]
    heap: list[tuple[float, int, int]] = []  # (time, model, slot): slot -1 = model's batch completes
    now = 0.0

    ends = [0.0] * m  # when each running batch completes

    def launch() -> None:
        if policy is None:
            go = [not running[i] and len(queues[i]) >= thr[i] for i in range(m)]
        else:
            go = policy(tuple(len(q) for q in queues), tuple(len(r) for r in running),
                        tuple(ends[i] - now if running[i] else 0.0 for i in range(m)))
        for i in range(m):
            if go[i] and not running[i] and queues[i]:
                running[i], queues[i] = queues[i], []
                ends[i] = now + latency(i, len(running[i]))
                heapq.heappush(heap, (ends[i], i, -1))

    launch()
    warmup = events // 10
    per_batch = (events - warmup) // batches
    marks: list[tuple[float, float]] = []  # (time, tokens) at warm-up end and after each batch
    tokens = 0.0
    event = 0  # instants at which some batch completes (hand-off arrivals alone do not count)
    while event < warmup + per_batch * batches:
        last, now = now, heap[0][0]
        due = []
        while heap and heap[0][0] - now < 1e-9:
            due.append(heapq.heappop(heap))
        completes = any(slot < 0 for _, _, slot in due)
        if completes and event >= warmup and (event - warmup) % per_batch == 0:
            marks.append((last, tokens))
        event += completes
        for _, i, slot in sorted(due, key=lambda e: e[2] >= 0):  # completions first, then arrivals
            if slot >= 0:
                queues[i].append(slot)
                continue
            row = commit[i]
            for slot in running[i]:
                j = router.next(slot, i)
                tokens += row[j]
                if j != i and handoff_ms > 0:
                    heapq.heappush(heap, (now + handoff_ms, j, slot))
                else:
                    queues[j].append(slot)
            running[i] = []
        launch()
    marks.append((now, tokens))
    t = np.array(marks)
    rates = np.diff(t[:, 1]) / np.diff(t[:, 0]) * 1000.0
    mean = (t[-1, 1] - t[0, 1]) / (t[-1, 0] - t[0, 0]) * 1000.0
    half = float(stats.t.ppf(0.975, len(rates) - 1) * rates.std(ddof=1) / np.sqrt(len(rates)))
    return SimResult(
        throughput_tok_s=float(mean),
        ci_low=float(mean - half),
        ci_high=float(mean + half),
        events=warmup + per_batch * batches,
        simulated_s=now / 1000.0,
    )
