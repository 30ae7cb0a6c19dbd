"""Connection-level limits of the HTTP server that uvicorn lacks: a deadline for each request's headers.

Why: uvicorn's keep-alive timer stops at a connection's first byte and starts again only after a response, so
a client that connects and sends nothing, or dribbles its header lines, held a connection (and a slot of
`server.max_connections`) forever. Slow bodies are the handlers' business (`server.body_timeout_s` -> 408).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class _HeaderDeadlineH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose next request's headers are not complete within
    `header_timeout_s` of the connection opening (or of the previous response ending)."""

    header_timeout_s = 10.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a request's headers are in
            self._disarm()

    def on_response_complete(self) -> None:
        self._arm()  # before: a pipelined request may start (and disarm) inside
        super().on_response_complete()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.timeout_keep_alive_handler()  # uvicorn's own way to close an idle connection


def h11_with_header_timeout(timeout_s: float) -> type[H11Protocol]:
    """The protocol class to hand uvicorn (`Config(http=...)`)."""
    return type("H11HeaderDeadline", (_HeaderDeadlineH11,), {"header_timeout_s": float(timeout_s)})
