"""`thresholds=auto`: the B*(N) table the runtime looks up as its active request count N changes (and, for
`runtime.policy=optimal`, the best local launch rules per N).

Results are cached on disk (cache_dir()/perfmodel/<digest>.json, keyed by every input the chain sees), so a
restart or a sweep over the same model set pays the search once.

Accuracy trade-off of the default quantum (`auto_quantum`): the slowest step becomes 200 quanta, so each
latency is rounded by at most 0.25% of the slowest step; a faster model's relative rounding error is larger
(6.0 ms next to 27.9 ms: 0.14 ms quantum, 6.0 -> 43 quanta = 6.0 ms, error < 1.2%). State spaces shrink about
linearly with the quanta per step, and the best thresholds are an argmax over few candidates, so they rarely
move; pass `quantum_ms` (e.g. 0.1, the paper's) for the exact setting.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence

from tokenrouter.cache import cache_dir
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.perfmodel.local import best_local_rule
from tokenrouter.perfmodel.optimize import optimize_table
from tokenrouter.perfmodel.spec import SystemSpec

CACHE_VERSION = 2


def auto_thresholds(
    route_matrix: Sequence[Sequence[float]],
    commit_matrix: Sequence[Sequence[float]],
    latencies: Sequence[LatencyProfile],
    max_concurrency: int,
    quantum_ms: float | None = None,
    context_tokens: int | None = None,
) -> dict[int, list[int]]:
    """B*(N) for every N in 1..max_concurrency (None quantum: `auto_quantum` for that many requests), on each
    model's step times at `context_tokens` of KV per request (None: at its profile's base context)."""
    spec = _spec(route_matrix, commit_matrix, latencies, max_concurrency, quantum_ms, context_tokens)

    def search() -> dict[int, list[int]]:
        # Screen every N at the coarse quantum, refine the few best at `quantum_ms`: ~5x faster than exhaustive.
        results = optimize_table(spec, max_concurrency, full_budget=0)
        return {n: list(res.best.thresholds) for n, res in results.items()}

    return _cached(f"auto-v{CACHE_VERSION}-{spec.key(max_concurrency)}-n{max_concurrency}", search)


def auto_local_rules(
    route_matrix: Sequence[Sequence[float]],
    commit_matrix: Sequence[Sequence[float]],
    latencies: Sequence[LatencyProfile],
    max_concurrency: int,
    quantum_ms: float | None = None,
    context_tokens: int | None = None,
) -> dict[int, list[int]]:
    """`runtime.policy=optimal`: for every N, each model's best launch rule on its own ready count as a bitmask
    (bit k: launch with k ready), searched from B*(N) (perfmodel.local)."""
    table = auto_thresholds(route_matrix, commit_matrix, latencies, max_concurrency, quantum_ms, context_tokens)
    spec = _spec(route_matrix, commit_matrix, latencies, max_concurrency, quantum_ms, context_tokens)

    def search() -> dict[int, list[int]]:
        return {n: best_local_rule(spec, n, table[n]).best.masks for n in range(1, max_concurrency + 1)}

    return _cached(f"local-v{CACHE_VERSION}-{spec.key(max_concurrency)}-n{max_concurrency}", search)


def _spec(route_matrix: Sequence[Sequence[float]], commit_matrix: Sequence[Sequence[float]],
          latencies: Sequence[LatencyProfile], max_concurrency: int, quantum_ms: float | None,
          context_tokens: int | None) -> SystemSpec:
    at = [lat.at_context(context_tokens) for lat in latencies]
    return SystemSpec.build(route_matrix, commit_matrix, at, quantum_ms, max_concurrency=max_concurrency)


def _cached(name: str, compute: Callable[[], dict[int, list[int]]]) -> dict[int, list[int]]:
    """A per-N table of integer lists from cache_dir()/perfmodel/NAME.json, else computed and stored."""
    path = cache_dir() / "perfmodel" / f"{name}.json"
    if path.is_file():
        try:
            return {int(n): [int(x) for x in b] for n, b in json.loads(path.read_text()).items()}
        except (ValueError, TypeError, AttributeError):
            pass  # a damaged cache entry is recomputed and overwritten
    table = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({str(n): b for n, b in table.items()}, f)
    os.replace(tmp, path)  # atomic: concurrent runtimes never read a half-written table
    return table
