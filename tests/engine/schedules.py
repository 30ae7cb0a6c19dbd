"""The step schedule both engines' exactness tests drive: requests join at different steps, r1 parks for 3
steps (a peer commits the reference's tokens meanwhile) and resumes with a 4-token extend; every step is one
engine call over whatever is active (mixed prefill / decode / extend)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tokenrouter.engine.base import StepItem

JOIN_AT = {"0": 0, "1": 0, "2": 3, "3": 5}
PARK = {"1": (4, 3)}  # request -> (step it parks at, tokens the peer commits meanwhile)


def staggered_parked_schedule(engine: Any, prompts: list[list[int]], refs: list[list[int]], new: int,
                              check: Callable[[int, list[StepItem], Any], None] | None = None) -> dict[str, list[int]]:
    """Each request's tokens (own and the peer's), `new` per request; `check(step, items, result)` sees every step."""
    out: dict[str, list[int]] = {r: [] for r in JOIN_AT}
    pending: dict[str, list[int]] = {}
    parked_until: dict[str, int] = {}
    step = 0
    while any(len(out[r]) < new for r in out):
        items = []
        for r, start in JOIN_AT.items():
            if step < start or len(out[r]) >= new or parked_until.get(r, -1) > step:
                continue
            if r in PARK and PARK[r][0] == step:  # the peer model produces these tokens meanwhile
                parked_until[r] = step + PARK[r][1]
                k = len(out[r])
                out[r] += refs[int(r)][k : k + PARK[r][1]]
                continue
            items.append(StepItem(r, pending.get(r) or prompts[int(r)]))
        res = engine.step(items)
        if check is not None:
            check(step, items, res)
        for r, tok in zip(res.rids, res.next_tokens, strict=True):
            out[r].append(tok)
            pending[r] = [tok]
        for r, until in list(parked_until.items()):
            if until == step + 1:  # resume: extend with the last own token plus the peer's tokens
                k = len(out[r])
                pending[r] = out[r][k - PARK[r][1] - 1 : k]
                del parked_until[r]
        step += 1
    return out
