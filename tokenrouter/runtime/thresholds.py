"""Delayed-batching thresholds B_i for each global active count N, always feasible.

Why clip: with N requests in the system and every queue below its threshold, sum_i (B_i - 1) >= N would
let all models wait forever. Keeping sum_i (B_i - 1) < N for the *current* N (which drops as a run drains)
means some queue always reaches its threshold, so deadlock is impossible by construction.

Spec forms (RuntimeConfig.thresholds): "auto"; [B_0, ..., B_{M-1}] for every N; or a per-N table
[[B_0, ...] for N=1, [...] for N=2, ...] whose last row serves larger N. "auto" uses the throughput model's
B*(N) table (runtime/threshold_planner.py) when it can be computed, else all ones (plain continuous batching).
"""

from __future__ import annotations

from typing import Any

from tokenrouter.errors import UserError


def make_feasible(thresholds: list[int], n: int) -> list[int]:
    """Lower the largest thresholds until sum(B_i - 1) < max(n, 1)."""
    b = [max(1, int(x)) for x in thresholds]
    while sum(x - 1 for x in b) >= max(n, 1):
        i = max(range(len(b)), key=b.__getitem__)
        b[i] -= 1
    return b


def infeasible_note(spec: Any, effective: list[int] | None, n: int) -> str | None:
    """One line when thresholds the user gave are infeasible at N and were lowered (correct by the paper's
    condition, but not what was asked for); None for "auto", for thresholds that stood, and when none apply."""
    if effective is None or not isinstance(spec, list | tuple) or not spec:
        return None
    asked = ThresholdTable(spec, len(effective)).asked(n)
    if asked == list(effective):
        return None
    return (f"runtime.thresholds {asked} are infeasible at N={n} (delayed batching needs sum(B_i - 1) < N): "
            f"lowered to {list(effective)}")


def _check_row(row: Any, num_models: int) -> list[int]:
    if not isinstance(row, list | tuple) or len(row) != num_models:
        raise UserError(f"runtime.thresholds: expected {num_models} thresholds (one per model), got {row!r}")
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in row):
        raise UserError(f"runtime.thresholds: thresholds must be integers >= 1, got {list(row)}")
    return list(row)


class ThresholdTable:
    """N -> effective thresholds (feasible), cached per N. `auto_rows` is B*(N) for N = 1..max (spec "auto")."""

    def __init__(self, spec: Any, num_models: int, delayed_batching: bool = True,
                 auto_rows: dict[int, list[int]] | None = None) -> None:
        self.num_models = num_models
        self.spec = spec
        if not delayed_batching or (spec == "auto" and not auto_rows):
            self._rows = [[1] * num_models]
        elif spec == "auto":
            assert auto_rows is not None
            self._rows = [_check_row(list(auto_rows[n]), num_models) for n in range(1, max(auto_rows) + 1)]
        elif isinstance(spec, list | tuple) and spec and all(isinstance(r, list | tuple) for r in spec):
            self._rows = [_check_row(r, num_models) for r in spec]
        elif isinstance(spec, list | tuple):
            self._rows = [_check_row(spec, num_models)]
        else:
            raise UserError(f"runtime.thresholds: expected 'auto', a list per model or a per-N table, got {spec!r}")
        self._cache: dict[int, list[int]] = {}

    def asked(self, n: int) -> list[int]:
        """The configured row for N (before it is made feasible)."""
        return list(self._rows[min(max(n, 1), len(self._rows)) - 1])

    def __call__(self, n: int) -> list[int]:
        if n not in self._cache:
            self._cache[n] = make_feasible(self.asked(n), n)
        return self._cache[n]
