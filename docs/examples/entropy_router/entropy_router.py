"""Hand a token to the large model when the small model's next-token distribution is uncertain.

The small model computes the entropy (nats) of its softmax at every step; above `threshold` it hands the step
to the large model, which generates one token, commits it and returns (R2R's shape, with a router that needs no
training). Rates for the throughput model are measured while serving: a one-token-return chain at the counted
hand-off rate.
"""

from __future__ import annotations

from typing import Any

import torch

from tokenrouter.algorithms.rates import measured_rate
from tokenrouter.api import Needs, RouterRequest, RoutingAlgorithm, StepResult, register


@register
class EntropyRouter(RoutingAlgorithm):
    name = "entropy"
    needs = Needs(step_outputs=frozenset({"logits"}), rates="measured")

    def __init__(self, model_index: int, model_names: list[str], threshold: float = 2.0, **params: Any) -> None:
        super().__init__(model_index, model_names, **params)
        self.threshold = float(threshold)

    def route(self, step: StepResult) -> list[int]:
        if self.model_index != 0 or step.logits is None:
            return [0] * len(step)  # the large model generates one token, then returns
        probs = torch.softmax(step.logits.float(), dim=-1)
        entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(dim=-1)
        return [1 if float(h) > self.threshold else 0 for h in entropy]

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        return self.model_index != 0  # the small model drops its token; the large model's is committed

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        return {"preset": "r2r", "route_prob": measured_rate(routes, 0, 1)}
