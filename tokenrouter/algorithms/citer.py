"""CITER: an MLP router on the small model's last hidden state estimates how confident we can be in the small
model's token; a token with confidence below `tau` (paper: 0.98) is dropped, the large model regenerates it
and hands the request back.

The router's raw score s is a "hard token" logit, so confidence = sigmoid(-s) and the rule
confidence < tau is s > logit(1 - tau): tau = 0 never routes, tau = 1 always does.
"""

from __future__ import annotations

import torch

from tokenrouter.algorithms.learned import LearnedRouting, logit
from tokenrouter.api import register


@register
class Citer(LearnedRouting):
    name = "citer"
    threshold_name = "tau"

    def flags(self, raw: torch.Tensor) -> torch.Tensor:
        return raw > logit(1.0 - self.threshold)
