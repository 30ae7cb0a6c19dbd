"""When a request finishes: one rule for every system and for single-model continuous batching.

Why its own module with no imports: the engine layer (engine/continuous.py) needs it as much as the routing
systems (tokenrouter/handoff.py), and a rule written twice drifts; outputs of two systems must end at the
same token for their comparison to mean anything.
"""

from __future__ import annotations

from collections.abc import Container


def finish_reason(token: int, num_output: int, max_new_tokens: int, stop_ids: Container[int]) -> str:
    """Checked right after a token is committed (`num_output` counts it): "stop" when it is a stop id (the
    stop token is part of the output), "length" once `max_new_tokens` are out, else "" (the request runs on)."""
    if token in stop_ids:
        return "stop"
    return "length" if num_output >= max_new_tokens else ""
