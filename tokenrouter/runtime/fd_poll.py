"""Readiness of a subserver's sources as plain file descriptors: its zmq inbox, listener and direct links.

Why not `zmq.Poller`: it re-reads every zmq socket's state (a getsockopt(ZMQ_EVENTS) each, ~3.6 us here) and
builds Python tuples per call; the subserver polls once per iteration and up to thousands of times a second
while spinning, all on the hand-off path. `epoll` (Linux; `poll` elsewhere) over descriptors costs 0.7-1.2 us.

A zmq socket takes part through its ZMQ_FD, which signals that its state may have changed, not that a frame
is waiting: whoever sees it readable must read ZMQ_EVENTS and drain while POLLIN is set (reading EVENTS is
also what clears the signal). The subserver's receive (runtime/subserver_io.py) does exactly that, and reads
only the sources the last poll named, so nothing waits unseen: a frame arriving after it re-signals the descriptor.
"""

from __future__ import annotations

import select
from collections.abc import KeysView


class FdPoller:
    """Register descriptors for reading; `poll(timeout_ms)` returns those readable (timeout < 0: forever)."""

    def __init__(self) -> None:
        self._epoll = hasattr(select, "epoll")  # else poll: macOS, BSDs (the same register / poll interface)
        self._impl = select.epoll() if self._epoll else select.poll()
        self._mask = select.EPOLLIN if self._epoll else select.POLLIN

    def register(self, fd: int) -> None:
        self._impl.register(fd, self._mask)

    def unregister(self, fd: int) -> None:
        self._impl.unregister(fd)

    def poll(self, timeout_ms: int) -> KeysView[int]:
        """Readable (or hung-up: the next read says so) descriptors, waiting up to `timeout_ms`. A set-like view
        built in C (no comprehension frame: this runs several times per hand-off, and in every spin)."""
        if self._epoll:  # epoll takes seconds (-1: forever), poll milliseconds (None: forever)
            timeout = timeout_ms / 1000.0 if timeout_ms >= 0 else -1
        else:
            timeout = timeout_ms if timeout_ms >= 0 else None
        return dict(self._impl.poll(timeout)).keys()

    def close(self) -> None:
        if self._epoll:
            self._impl.close()
