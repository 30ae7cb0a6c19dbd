"""Step-latency profiles: L(batch size, new tokens) for the sim engine and the throughput model.

Three forms, one class: a constant, an affine fit, or a table measured by `tokenrouter profile`, whose JSON is
  {"model": str, "device": str, "dtype": str, "context": int,
   "decode_ms": {"1": ms, "2": ms, ...},        # median decode-step latency per batch size at `context`
   "decode_ms_by_context": {"256": {"1": ms, ...}, "2048": {...}},  # optional: the same table per context
   "contexts_skipped": {"8192": why},            # optional: contexts asked for but not measured
   "extend_ms_per_token": ms}                    # extra cost per prefill/extend token beyond one per request
Batch sizes between table entries are interpolated linearly; beyond the table, extrapolated from the last two.
Why per context: attention reads every cached token, so a step at 8k tokens of context costs more than at 256;
`at_context` gives the table at a workload's mean context (linear between measured contexts, clamped outside).
Profiles without `decode_ms_by_context` (older ones) have the `decode_ms` table at every context.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tokenrouter.errors import UserError


@dataclass(frozen=True)
class LatencyProfile:
    base_ms: float = 0.0
    per_request_ms: float = 0.0
    per_token_ms: float = 0.0  # per new token beyond one per request (extend / prefill cost)
    table: tuple[tuple[int, float], ...] = field(default=())  # sorted (batch size, decode ms)
    # sorted (context tokens, table at that context); empty: `table` at every context
    by_context: tuple[tuple[int, tuple[tuple[int, float], ...]], ...] = field(default=())

    def decode_ms(self, batch_size: int) -> float:
        """Latency of a pure decode step (one new token per request)."""
        if batch_size <= 0:
            return 0.0
        if not self.table:
            return self.base_ms + self.per_request_ms * batch_size
        sizes = [b for b, _ in self.table]
        if len(self.table) == 1:
            return self.table[0][1]
        if batch_size <= sizes[0]:
            return self.table[0][1]
        for (b0, l0), (b1, l1) in zip(self.table, self.table[1:], strict=False):
            if batch_size <= b1:
                return l0 + (l1 - l0) * (batch_size - b0) / (b1 - b0)
        (b0, l0), (b1, l1) = self.table[-2], self.table[-1]
        return l1 + (l1 - l0) * (batch_size - b1) / (b1 - b0)

    def step_ms(self, batch_size: int, new_tokens: int | None = None) -> float:
        """Latency of a step of `batch_size` requests appending `new_tokens` tokens in all."""
        extra = max(0, (new_tokens if new_tokens is not None else batch_size) - batch_size)
        return self.decode_ms(batch_size) + self.per_token_ms * extra

    def at_context(self, tokens: int | None) -> LatencyProfile:
        """This profile with its decode table at `tokens` of context per request: linear between the two nearest
        measured contexts (per batch size), clamped outside them; unchanged for None or no per-context table."""
        if tokens is None or not self.by_context:
            return self
        contexts = [c for c, _ in self.by_context]
        i = bisect_right(contexts, tokens)
        if i == 0 or i == len(contexts):
            return replace(self, table=self.by_context[max(0, i - 1)][1])
        (c0, t0), (c1, t1) = self.by_context[i - 1], self.by_context[i]
        lo, hi, w = LatencyProfile(table=t0), LatencyProfile(table=t1), (tokens - c0) / (c1 - c0)
        sizes = sorted({b for b, _ in t0} | {b for b, _ in t1})
        return replace(self, table=tuple((b, lo.decode_ms(b) + (hi.decode_ms(b) - lo.decode_ms(b)) * w)
                                         for b in sizes))

    @classmethod
    def constant(cls, ms: float) -> LatencyProfile:
        return cls(base_ms=float(ms))

    @classmethod
    def from_json(cls, path: str | Path) -> LatencyProfile:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"latency profile not found: {p}")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"latency profile {p}: not a `tokenrouter profile` JSON ({exc})") from None
        return cls.from_dict(data, f"latency profile {p}")

    @classmethod
    def from_dict(cls, data: Any, where: str) -> LatencyProfile:
        """From the `tokenrouter profile` JSON object; `where` names it in errors."""
        try:
            table = _table(data["decode_ms"], where)
            by_context = tuple(sorted((int(c), _table(t, where))
                                      for c, t in (data.get("decode_ms_by_context") or {}).items()))
            per_token = float(data.get("extend_ms_per_token", 0.0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UserError(f"{where}: not a `tokenrouter profile` JSON ({exc})") from None
        if any(c <= 0 for c, _ in by_context):
            raise UserError(f"{where}: `decode_ms_by_context` needs positive context lengths")
        return cls(per_token_ms=per_token, table=table, by_context=by_context)


def _table(decode_ms: Any, where: str) -> tuple[tuple[int, float], ...]:
    """A `decode_ms` object as a sorted (batch size, ms) table."""
    table = tuple(sorted((int(b), float(ms)) for b, ms in decode_ms.items()))
    if not table or any(b <= 0 or ms < 0 for b, ms in table):
        raise UserError(f"{where}: `decode_ms` needs positive batch sizes and latencies")
    return table
