"""The HTTP/1.1 protocol `tokenrouter serve` hands uvicorn, with a connection limit uvicorn lacks: a deadline for
each request's headers.

Why the deadline: uvicorn's keep-alive timer stops at a connection's first byte and starts again only after a
response, so a client that connects and sends nothing, or dribbles its header lines, held a connection (and a
slot of `server.max_connections`) forever. Slow bodies are the handlers' business (`server.body_timeout_s` -> 408).

Two parsers, `server.http`: `httptools` (default; llhttp in C, uvicorn's own choice when installed) or `h11`
(pure Python). A streamed token is one chunk through the protocol: h11 frames each in Python, which was an
eighth of the server's CPU per streamed token (`benchmarks/bench_http.py --http httptools,h11` measures both).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _HeaderDeadline:
    """Mixed in before uvicorn's protocol class: closes a connection whose next request's headers are not
    complete within `header_timeout_s` of the connection opening (or of the previous response ending). The
    subclass disarms when a request's headers are in and says when no request is in progress (`_idle`)."""

    header_timeout_s = 10.0
    _deadline: asyncio.TimerHandle | None = None
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        self._arm()  # before: a pipelined request may start (and disarm) inside
        super().on_response_complete()  # type: ignore[misc]

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _idle(self) -> bool:
        raise NotImplementedError

    def _headers_late(self) -> None:
        self._deadline = None
        if self._idle() and not self.transport.is_closing():
            self.timeout_keep_alive_handler()  # type: ignore[attr-defined]  # uvicorn's way to close an idle one


class _HeaderDeadlineH11(_HeaderDeadline, H11Protocol):
    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a request's headers are in
            self._disarm()

    def _idle(self) -> bool:
        return self.conn.their_state is h11.IDLE


class _HeaderDeadlineHttpTools(_HeaderDeadline, HttpToolsProtocol):
    """A dribbled request has begun (on_message_begin) but gets a cycle only once its headers are complete: no
    request is in progress while the last cycle's response is complete and nothing is pipelined."""

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def _idle(self) -> bool:
        return (self.cycle is None or self.cycle.response_complete) and not self.pipeline


_PROTOCOLS: dict[str, type[_HeaderDeadlineH11] | type[_HeaderDeadlineHttpTools]] = {
    "httptools": _HeaderDeadlineHttpTools, "h11": _HeaderDeadlineH11}
PARSERS = tuple(_PROTOCOLS)  # server.http's values, the default first


def with_header_timeout(parser: str, timeout_s: float) -> type[H11Protocol] | type[HttpToolsProtocol]:
    """The protocol class to hand uvicorn (`Config(http=...)`) for `parser` (one of PARSERS)."""
    base = _PROTOCOLS[parser]
    return type(base.__name__.lstrip("_"), (base,), {"header_timeout_s": float(timeout_s)})
