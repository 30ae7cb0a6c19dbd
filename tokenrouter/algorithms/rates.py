"""Routing rates for the throughput model (`runtime.thresholds=auto`).

Every algorithm's `rates(routes)` returns the parameters of its throughput-model preset (tokenrouter.perfmodel):
the preset name plus the route probabilities, measured when the runtime has counted decisions
(`routes[i][j]` = decisions on model i that sent a request to model j, the `routes` of each model in the front
end's stats()), else the algorithm's prior estimate (e.g. a trained router's held-out route rate), else None.
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_DECISIONS = 50  # fewer decisions than this on a model: too noisy, fall back to the prior


def measured_rate(routes: Sequence[Sequence[int]] | None, source: int, dest: int) -> float | None:
    """Share of model `source`'s decisions that went to `dest`, or None without enough measurements."""
    if not routes or source >= len(routes):
        return None
    row = routes[source]
    total = sum(row)
    if total < MIN_DECISIONS or dest >= len(row):
        return None
    return row[dest] / total
