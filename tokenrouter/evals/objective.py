"""The objective(s) a sweep's jobs return: the summary values a config names in `objective`, all maximised.

Hydra's Optuna sweeper optimises what the task function returns (a float, or one per direction), while a
`tokenrouter bench` run produces a whole summary; `objective: [accuracy, throughput_tok_s]` picks the values
the sampler sees, so a multi-objective sampler (NSGA-II, MOTPE) searches router thresholds for the accuracy /
throughput frontier. Names are checked before anything runs, since a typo would otherwise fail every trial
only after its run finished.
"""

from __future__ import annotations

import math
from typing import Any

from tokenrouter.config import plain
from tokenrouter.errors import UserError

# summary.json values for which more is better (large_token_share: the strong model's share of tokens, the
# accuracy side of the trade-off on workloads that are not graded, e.g. sim engines)
OBJECTIVES = (
    "accuracy",
    "throughput_tok_s",
    "per_request_throughput_tok_s",
    "steady_throughput_tok_s",
    "output_throughput",
    "total_token_throughput",
    "request_throughput",
    "request_goodput",
    "large_token_share",
)


def objective_names(value: Any) -> list[str]:
    """The `objective` config (a name or a list of names) as a checked list; one line naming the bad one."""
    value = plain(value)
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise UserError(f"objective must be a summary key or a list of them, got {value!r}; known: "
                        f"{', '.join(OBJECTIVES)}")
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown:
        raise UserError(f"objective: unknown summary key {unknown[0]!r}; known (all maximised): "
                        f"{', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names):
        raise UserError(f"objective names a key twice: {names}")
    return names


def objective_values(summary: dict[str, Any], names: list[str]) -> list[float]:
    """The named values of a finished run's summary; a run that has none (e.g. accuracy of an ungraded
    workload) is an error rather than a silent 0 that would steer the search."""
    values = []
    for name in names:
        value = summary.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise UserError(f"objective {name!r}: this run's summary has no value for it ({value!r})")
        values.append(float(value))
    return values


def directions(value: Any) -> list[str]:
    """Optuna's `direction` for the objective: maximise each (what `hydra.sweeper.direction` resolves to)."""
    return ["maximize"] * len(objective_names(value))
