"""R-Stitch: training-free, symmetric switching on the next-token distribution's normalized entropy
H(p) / log(vocab) in [0, 1]. On the small model a token above `tau` (paper: 0.03) moves the request to the
large model; on the large model a token at or below `tau` moves it back. Both sides commit their tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from tokenrouter.algorithms.learned import WEIGHTLESS
from tokenrouter.algorithms.rates import measured_rate
from tokenrouter.api import Needs, RouterRequest, RoutingAlgorithm, StepResult, register
from tokenrouter.engine.base import Engine
from tokenrouter.errors import UserError


def normalized_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per row divided by log(vocab): 0 = one-hot, 1 = uniform."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return (entropy / torch.log(torch.tensor(float(logits.shape[-1]), dtype=torch.float64))).clamp_(0.0, 1.0)


@register
class RStitch(RoutingAlgorithm):
    name = "rstitch"
    needs = Needs(step_outputs=frozenset({"logits"}), rates="measured")  # the entropy; no rate prior

    def __init__(self, model_index: int, model_names: list[str], tau: float = 0.03, **params: Any) -> None:
        super().__init__(model_index, model_names, **params)
        if self.num_models != 2:
            raise UserError(f"rstitch: needs exactly 2 models (small, large), got {self.num_models}")
        if not 0.0 <= float(tau) <= 1.0:
            raise UserError(f"rstitch: tau must be in [0, 1], got {tau}")
        self.tau = float(tau)

    def bind(self, engine: Engine) -> None:
        if not engine.hidden_size:
            raise UserError(f"rstitch: model {self.model_names[self.model_index]!r} gives no logits; {WEIGHTLESS}")

    def route(self, step: StepResult) -> list[int]:
        if step.logits is None:
            raise UserError(f"rstitch: needs next-token logits; model {self.model_names[self.model_index]!r} "
                            f"gives none; {WEIGHTLESS}")
        # The same rule on both sides: uncertain -> large (index 1), confident -> small (index 0); on the
        # large model that means staying while uncertain and handing back once confident.
        return [1 if u else 0 for u in (normalized_entropy(step.logits) > self.tau).tolist()]

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        return True

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        """Throughput-model preset: symmetric switching, small->large p01 and large->small p10 (measured only:
        entropy statistics depend on the models and prompts, there is no prior)."""
        return {"preset": "rstitch", "p01": measured_rate(routes, 0, 1), "p10": measured_rate(routes, 1, 0)}
