"""Thresholds vs the best rule a subserver can run vs the full-state optimum, for one N.

Why three: thresholds are what the runtime ran; the local rule (perfmodel.local) is the best any subserver can
do on what it observes; the optimum (perfmodel.policy) needs every model's queue and remaining step time, so
the gap between the last two is what broadcasting more state could buy at most.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenrouter.perfmodel.local import best_local_rule
from tokenrouter.perfmodel.optimize import optimize
from tokenrouter.perfmodel.policy import solve
from tokenrouter.perfmodel.spec import SystemSpec


@dataclass(frozen=True)
class PolicyComparison:
    """For one N: the best thresholds, the best rule on a subserver's own observation, the full-state optimum."""

    n: int
    thresholds: tuple[int, ...]
    thresholds_tok_s: float
    local_masks: list[int]  # per model, bit k: launch with k queued (runtime.policy=optimal sends these)
    local_tok_s: float
    local_exhaustive: bool
    optimal_tok_s: float
    num_states: int

    @property
    def gap(self) -> float:
        """Relative gain of the full-state optimum over the best thresholds."""
        return self.optimal_tok_s / self.thresholds_tok_s - 1.0

    @property
    def local_gap(self) -> float:
        return self.local_tok_s / self.thresholds_tok_s - 1.0

    def to_dict(self) -> dict:
        return {"concurrency": self.n, "thresholds": list(self.thresholds),
                "thresholds_tok_s": self.thresholds_tok_s, "local_masks": self.local_masks,
                "local_tok_s": self.local_tok_s, "local_exhaustive": self.local_exhaustive,
                "optimal_tok_s": self.optimal_tok_s, "gap": self.gap, "local_gap": self.local_gap,
                "num_states": self.num_states}


def compare(spec: SystemSpec, n: int) -> PolicyComparison:
    """Best thresholds (exhaustive at this quantum when cheap), best local rule, and the optimal policy."""
    best = optimize(spec, n).best
    local = best_local_rule(spec, n, best.thresholds)
    opt = solve(spec, n, best.thresholds)
    return PolicyComparison(n, best.thresholds, best.throughput_tok_s, local.best.masks,
                            local.best.throughput_tok_s, local.exhaustive, opt.throughput_tok_s, opt.num_states)
