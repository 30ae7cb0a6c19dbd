"""What the HTTP server needs of a front end: the typed interface `FrontEnd`, and the stream events it yields.

Why a Protocol: the server (app.py) sits above the runtime and must never be imported by it, so the runtime's
`TokenRouterFrontend` cannot name this interface; it implements it structurally, and so does any other object
handed to `create_app`. The server calls every member directly (no probing with hasattr / getattr), so a front
end that lacks one fails at once, and tests/server/test_frontend_api.py checks every shipped front end against
this list, so a new one cannot silently miss a member.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Protocol

from tokenrouter.generation import GenerationRequest, GenerationResult


class FrontEndEvent(Protocol):
    """One event of a request's stream: newly committed tokens in order; the last event carries the result
    (the runtime's `StreamEvent`)."""

    token_ids: list[int]  # the tokens committed since the previous event (may be empty on the last one)
    result: GenerationResult | None  # the finished request, on the last event only
    model: str  # the model that committed `token_ids` (a stream cut by a stop string counts tokens per model)


class FrontEnd(Protocol):
    """A front end the HTTP server serves: TokenRouter's runtime (`tokenrouter.runtime.frontend`) or any other
    object with these members."""

    model_names: list[str]
    """The served models, entry model first: `/v1/models` lists them as members and `/health` names them."""

    @property
    def eos_token_ids(self) -> list[int]:
        """The entry model's EOS ids: `/v1/models` reports them, so an external dispatcher stops as we do."""
        ...

    async def start(self) -> None:
        """Bring the front end up: the app's lifespan calls it before serving (with `manage_frontend`)."""
        ...

    async def close(self) -> None:
        """Shut the front end down: the app's lifespan calls it on shutdown (with `manage_frontend`)."""
        ...

    def stream(self, req: GenerationRequest) -> AsyncGenerator[FrontEndEvent, None]:
        """Run one request, yielding its events: every generation endpoint; closing the generator aborts it."""
        ...

    def health_problem(self) -> str | None:
        """Why the front end cannot serve (None: it can): `/health` answers 503 `unhealthy` with it."""
        ...

    def algorithm_trouble(self) -> dict[str, Any] | None:
        """Recent routing-algorithm failures, with `last_error` (None: none lately): `/health` says `degraded`."""
        ...

    async def refresh_stats(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """Current statistics (`models.<name>.<key>` and top-level numbers): `/metrics` exports them."""
        ...
