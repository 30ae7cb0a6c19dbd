"""A test-only algorithm that declares what it needs (`Needs`) rather than having the runtime guess: route()
reads the step's logits and nothing else, and its routing rate is only known once measured. route() fails
the step when a system hands it anything else, so a test passing proves every system honoured the
declaration; its YAML is declared.yaml next to it (one class + one YAML, as a user's own algorithm)."""

from __future__ import annotations

from typing import Any

from tokenrouter.algorithms.rates import measured_rate
from tokenrouter.api import Needs, RouterRequest, RoutingAlgorithm, StepResult, register


@register
class Declared(RoutingAlgorithm):
    """R2R's shape on a training-free signal: the small model hands a token to the large model when its top
    two logits are closer than `margin`; the large model regenerates it, commits it and hands back."""

    name = "declared"
    needs = Needs(step_outputs=frozenset({"logits"}), rates="measured")

    def __init__(self, model_index: int, model_names: list[str], margin: float = 0.2, **params: Any) -> None:
        super().__init__(model_index, model_names, **params)
        self.margin = float(margin)

    def route(self, step: StepResult) -> list[int]:
        if step.logits is None or step.hidden is not None:
            raise AssertionError(f"declared logits only, got logits={step.logits is not None}, "
                                 f"hidden={step.hidden is not None}")
        if self.model_index != 0:
            return [0] * len(step)
        top2 = step.logits.float().topk(2, dim=-1).values
        return [1 if gap < self.margin else 0 for gap in (top2[:, 0] - top2[:, 1]).tolist()]

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        return self.model_index != 0

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        return {"preset": "bernoulli", "route_prob": measured_rate(routes, 0, 1)}
