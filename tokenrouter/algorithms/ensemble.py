"""Mixture ensemble: after every token the model for the next one is drawn from fixed weights over 2+ models
(paper: 0.5 / 0.3 / 0.2 over 0.6B / 8B / 32B). Every token is committed by the model that produced it; the
entry model produces the first. The draw for a request at an output position depends only on (request seed,
position), so it is the same on whichever model the request sits and under any batching or schedule.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any

from tokenrouter.api import Needs, RouterRequest, RoutingAlgorithm, StepResult, register, stable_uniform
from tokenrouter.errors import UserError


@register
class Ensemble(RoutingAlgorithm):
    name = "ensemble"
    needs = Needs(step_outputs=frozenset(), rates="preset")  # draws on (seed, position) from fixed weights

    def __init__(self, model_index: int, model_names: list[str], weights: list[float] | None = None, **params: Any) -> None:
        super().__init__(model_index, model_names, **params)
        weights = [1.0 / self.num_models] * self.num_models if weights is None else [float(w) for w in weights]
        if self.num_models < 2 or len(weights) != self.num_models:
            raise UserError(f"ensemble: needs one weight per model ({self.num_models} models), got {weights}")
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise UserError(f"ensemble: weights must be >= 0 with a positive sum, got {weights}")
        total = sum(weights)
        self.weights = [w / total for w in weights]
        self._cumulative = list(itertools.accumulate(self.weights))

    def draw(self, req: RouterRequest) -> int:
        """The model for the token after the one just produced at `req.position`."""
        u = stable_uniform("ensemble", req.seed, req.position)
        return min(bisect.bisect_right(self._cumulative, u), self.num_models - 1)

    def route(self, step: StepResult) -> list[int]:
        return [self.draw(req) for req in step.requests]

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        return True

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        """Throughput-model preset: the next model is drawn from the fixed weights, whatever was measured."""
        return {"preset": "ensemble", "weights": list(self.weights)}
