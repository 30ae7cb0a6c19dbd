"""R2R (Roads to Rome): the official router scores each small-model token; a token predicted "divergent"
(sigmoid(score) >= threshold) is dropped, the large model regenerates it and hands the request back.

Parameters: `router` (our safetensors + JSON router, or an official torch-saved checkpoint, local or on the
Hub as a file, folder or repo such as `GY2233/Qwen3_4B_Qwen_8B`, resolved as official R2R does: see
tokenrouter.algorithms.router_sources) and `threshold` (None: the one saved with the router; the paper used
0.406 on AIME, 0.42 on GPQA).
"""

from __future__ import annotations

import torch

from tokenrouter.algorithms.learned import LearnedRouting, logit
from tokenrouter.api import register


@register
class R2R(LearnedRouting):
    name = "r2r"

    def flags(self, raw: torch.Tensor) -> torch.Tensor:
        return raw >= logit(self.threshold)
