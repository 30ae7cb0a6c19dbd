"""A test-only algorithm whose route() fails on one request's input (seed POISON_SEED), as a router can on a
hostile input: the step fails for the whole batch, and the subserver must isolate the one request."""

from __future__ import annotations

from tokenrouter.algorithms.bernoulli import Bernoulli
from tokenrouter.api import StepResult, register

POISON_SEED = 13


@register
class Poisoned(Bernoulli):
    name = "poisoned"

    def route(self, step: StepResult) -> list[int]:
        if any(r.seed == POISON_SEED for r in step.requests):
            raise FloatingPointError("router input is NaN")
        return super().route(step)
