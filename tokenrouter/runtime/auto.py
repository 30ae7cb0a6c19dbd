"""`runtime.thresholds=auto`: the B*(N) table from the throughput model (tokenrouter.perfmodel).

Why here and not in the scheduler: the front end owns N and sends every subserver its threshold, so the
(possibly slow, disk-cached) search runs once, in one process, off the event loop. The model needs step
latencies and routing rates: latencies come from sim engines' SimSpec; rates from the algorithm's params
(perfmodel's presets: bernoulli/r2r-style `route_prob`, rstitch `p01`/`p10`, ensemble `weights`). When either
is unknown (torch engines have no latency profile here, learned routers no fixed rate) the documented
default is all ones: plain continuous batching, never a stall.
"""

from __future__ import annotations

import logging

from tokenrouter.config import AlgorithmSpec, ModelSpec
from tokenrouter.engine.sim import sim_latency
from tokenrouter.errors import UserError

log = logging.getLogger(__name__)


def auto_table(models: list[ModelSpec], algorithm: AlgorithmSpec, max_n: int) -> dict[int, list[int]] | None:
    """B*(N) for N = 1..max_n, or None (caller uses all ones) with a logged reason."""
    if len(models) < 2:
        return None  # one model: nothing to wait for
    if any(m.engine != "sim" for m in models):
        log.warning("thresholds=auto: step latencies are known for sim engines only; using thresholds of 1")
        return None
    from tokenrouter.perfmodel import auto_thresholds, preset_for_algorithm

    try:
        route, commit = preset_for_algorithm(algorithm.name, algorithm.params)
    except UserError as exc:
        log.warning("thresholds=auto: %s; using thresholds of 1", exc)
        return None
    if len(route) != len(models):
        log.warning("thresholds=auto: the %r preset describes %d models, not %d; using thresholds of 1",
                    algorithm.name, len(route), len(models))
        return None
    return auto_thresholds(route, commit, [sim_latency(m.sim) for m in models], max_n)
