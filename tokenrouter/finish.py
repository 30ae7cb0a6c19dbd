"""When a request finishes: one rule for every system and for single-model continuous batching.

Why its own module with no imports: the engine layer (engine/continuous.py) needs it as much as the routing
systems (tokenrouter/handoff.py), and a rule written twice drifts; outputs of two systems must end at the
same token for their comparison to mean anything.
"""

from __future__ import annotations

from collections.abc import Container, Iterable


def finish_reason(token: int, num_output: int, max_new_tokens: int, stop_ids: Container[int],
                  min_new_tokens: int = 0) -> str:
    """Checked right after a token is committed (`num_output` counts it): "stop" when it is a stop id (the
    stop token is part of the output) past the first `min_new_tokens`, "length" once `max_new_tokens` are out,
    else "" (the request runs on)."""
    if token in stop_ids and num_output > min_new_tokens:
        return "stop"
    return "length" if num_output >= max_new_tokens else ""


def banned_ids(num_output: int, min_new_tokens: int, stop_ids: Iterable[int]) -> tuple[int, ...]:
    """The token ids the next step may not sample for a request with `num_output` tokens out: its stop ids
    while fewer than `min_new_tokens` are out (vLLM's / SGLang's min_tokens), else none."""
    return tuple(sorted(stop_ids)) if num_output < min_new_tokens else ()
