"""Single-model serving through the same runtime: every request stays on the model it is on.

Why: LLM-only / SLM-only baselines and `tokenrouter serve` with one model reuse the runtime's scheduler,
streaming and supervision instead of a second server implementation.
"""

from __future__ import annotations

from tokenrouter.api import Needs, RoutingAlgorithm, StepResult, register


@register
class Stay(RoutingAlgorithm):
    name = "stay"
    needs = Needs(step_outputs=frozenset())

    def route(self, step: StepResult) -> list[int]:
        return [self.model_index] * len(step)
