"""RouteLLM's measures of a quality-vs-cost curve: APGR and CPT, over (strong-model share, accuracy) points.

Why here: the query-level routing baseline reports them for its own router (as RouteLLM evaluates routers),
and the reports compute them for token-level runs too; baselines may import only the core, the reports may
import tokenrouter.baselines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _curve(points: Sequence[tuple[float, float]], weak_acc: float, strong_acc: float) -> np.ndarray:
    """(strong share, accuracy) sorted by share, anchored at (0, weak) and (1, strong) like RouteLLM's curves."""
    pts = sorted({(float(s), float(a)) for s, a in points if 0.0 < float(s) < 1.0})
    return np.array([(0.0, weak_acc), *pts, (1.0, strong_acc)])


def apgr(points: Sequence[tuple[float, float]], weak_acc: float, strong_acc: float) -> float:
    """Average performance gap recovered: (area under accuracy-vs-strong-share - weak) / (strong - weak)."""
    if strong_acc == weak_acc:
        return math.nan
    curve = _curve(points, weak_acc, strong_acc)
    area = float(np.sum(np.diff(curve[:, 0]) * (curve[1:, 1] + curve[:-1, 1]) / 2))
    return (area - weak_acc) / (strong_acc - weak_acc)


def cpt(
    points: Sequence[tuple[float, float]], weak_acc: float, strong_acc: float, target: float = 0.5
) -> float:
    """Call-performance threshold CPT(target): the smallest strong share whose accuracy recovers `target` of
    the weak-strong gap, interpolating linearly between measured points (NaN when the gap is zero)."""
    if strong_acc == weak_acc:
        return math.nan
    goal = weak_acc + target * (strong_acc - weak_acc)
    curve = _curve(points, weak_acc, strong_acc)
    rising = strong_acc > weak_acc
    for (s0, a0), (s1, a1) in zip(curve[:-1], curve[1:], strict=True):
        reached0, reached1 = (a0 >= goal, a1 >= goal) if rising else (a0 <= goal, a1 <= goal)
        if reached0:
            return float(s0)
        if reached1:
            return float(s0 + (s1 - s0) * (goal - a0) / (a1 - a0))
    return 1.0
