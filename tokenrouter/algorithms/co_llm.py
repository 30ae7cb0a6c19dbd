"""Co-LLM: a linear deferral head on the base (small) model's hidden state gives P(defer); when it exceeds
`eta` (paper: 0.15) the small token is dropped, the large (assistant) model generates one token and hands
the request back.
"""

from __future__ import annotations

import torch

from tokenrouter.algorithms.learned import LearnedRouting, logit
from tokenrouter.api import register


@register
class CoLLM(LearnedRouting):
    name = "co_llm"
    threshold_name = "eta"

    def flags(self, raw: torch.Tensor) -> torch.Tensor:
        return raw > logit(self.threshold)
