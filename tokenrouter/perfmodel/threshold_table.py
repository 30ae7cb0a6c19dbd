"""`thresholds=auto`: the B*(N) table the runtime looks up as its active request count N changes.

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
from collections.abc import Sequence

from tokenrouter.cache import cache_dir
from tokenrouter.engine.latency import LatencyProfile
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
    latencies = [lat.at_context(context_tokens) for lat in latencies]
    spec = SystemSpec.build(
        route_matrix, commit_matrix, latencies, quantum_ms, max_concurrency=max_concurrency
    )
    path = (
        cache_dir()
        / "perfmodel"
        / f"auto-v{CACHE_VERSION}-{spec.key(max_concurrency)}-n{max_concurrency}.json"
    )
    if path.is_file():
        try:
            return {int(n): [int(x) for x in b] for n, b in json.loads(path.read_text()).items()}
        except (ValueError, TypeError, AttributeError):
            pass  # a damaged cache entry is recomputed and overwritten
    # Screen every N at the coarse quantum, refine the few best at `quantum_ms`: ~5x faster than exhaustive.
    results = optimize_table(spec, max_concurrency, full_budget=0)
    table = {n: list(res.best.thresholds) for n, res in results.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({str(n): b for n, b in table.items()}, f)
    os.replace(tmp, path)  # atomic: concurrent runtimes never read a half-written table
    return table
