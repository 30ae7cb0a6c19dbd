"""Fixed-probability hand-off, for system studies: R2R's shape without a router network.

On the entry (small) model each step hands off with probability `route_prob`, dropping the sampled token;
the large model generates one token, commits it and returns. The decision for a request at an output
position depends only on (request seed, position), so it is identical across schedules and concurrency.
"""

from __future__ import annotations

from typing import Any

from tokenrouter.api import Needs, RouterRequest, RoutingAlgorithm, StepResult, register, stable_uniform
from tokenrouter.errors import UserError


@register
class Bernoulli(RoutingAlgorithm):
    name = "bernoulli"
    needs = Needs(step_outputs=frozenset(), rates="preset")  # routes on (seed, position) alone

    def __init__(self, model_index: int, model_names: list[str], route_prob: float = 0.35, **params: Any) -> None:
        super().__init__(model_index, model_names, **params)
        if not 0.0 <= float(route_prob) <= 1.0:
            raise UserError(f"bernoulli: route_prob must be in [0, 1], got {route_prob}")
        self.route_prob = float(route_prob)

    def route(self, step: StepResult) -> list[int]:
        if self.model_index != 0:
            return [0] * len(step)  # the large model generates one token, then returns
        return [1 if self._hand_off(req) else 0 for req in step.requests]

    def _hand_off(self, req: RouterRequest) -> bool:
        return stable_uniform("bernoulli", req.seed, req.position) < self.route_prob

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        return self.model_index != 0  # small drops its token (large regenerates); large's token is committed

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        """Throughput-model preset: the fixed hand-off probability (the default 0.35 included)."""
        return {"preset": "bernoulli", "route_prob": self.route_prob}
