"""A test-only algorithm whose routing rate is unknown until measured (like a learned router at a swept
threshold, or an official checkpoint): its param is not named like the preset's, and `rates()` reports only
what the runtime counted."""

from __future__ import annotations

from typing import Any

from tokenrouter.algorithms.bernoulli import Bernoulli
from tokenrouter.algorithms.rates import measured_rate
from tokenrouter.api import Needs, register


@register
class MeasuredOnly(Bernoulli):
    name = "measured_only"
    needs = Needs(step_outputs=frozenset(), rates="measured")

    def __init__(self, model_index: int, model_names: list[str], p: float = 0.35, **params: Any) -> None:
        super().__init__(model_index, model_names, route_prob=p, **params)

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        return {"preset": "bernoulli", "route_prob": measured_rate(routes, 0, 1)}
