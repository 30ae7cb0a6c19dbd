"""A test-only algorithm loaded from outside the package (as a user's own algorithm would be): the hand-off
probability is chosen per request by its seed, so one front end serves never-routed, always-routed and
mixed requests side by side (process start-up with torch is the slow part of these tests)."""

from __future__ import annotations

from tokenrouter.algorithms.bernoulli import Bernoulli
from tokenrouter.api import RouterRequest, register, stable_uniform

PROB_BY_SEED_MOD_3 = (0.0, 1.0, 0.35)


@register
class Seeded(Bernoulli):
    name = "seeded"

    def _hand_off(self, req: RouterRequest) -> bool:
        return stable_uniform("seeded", req.seed, req.position) < PROB_BY_SEED_MOD_3[req.seed % 3]
