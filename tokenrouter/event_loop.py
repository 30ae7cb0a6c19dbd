"""The event loop every front end runs on: uvloop where it is installed, asyncio's own loop otherwise.

Why: the front end is on the path of every committed token (a subserver's report read, reassembled, handed to
a stream or an HTTP response), and at these rates asyncio's pure-Python loop machinery is a large part of
its CPU. uvloop (libuv) runs the same coroutines with the loop's bookkeeping in C; SGLang's and vLLM's HTTP
servers run on it too. Measured here (`benchmarks/bench_runtime.py handoff`, `benchmarks/bench_http.py`): the
README's table. `TOKENROUTER_EVENT_LOOP=asyncio` forces the standard loop (to bisect a loop-specific problem).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tokenrouter.errors import UserError

T = TypeVar("T")

ENV = "TOKENROUTER_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


def loop_factory(setting: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """`setting` (default `$TOKENROUTER_EVENT_LOOP`): auto (default: uvloop if installed), uvloop (required), or
    asyncio."""
    choice = (os.environ.get(ENV, "auto") if setting is None else setting).strip().lower() or "auto"
    if choice not in CHOICES:
        raise UserError(f"${ENV} must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise UserError(f"${ENV}=uvloop but uvloop is not installed (pip install uvloop)") from None
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def loop_name() -> str:
    """Which loop `run()` uses here (summary.json's `provenance.event_loop`)."""
    return "uvloop" if loop_factory() is not asyncio.new_event_loop else "asyncio"


def run(main: Coroutine[Any, Any, T], setting: str | None = None) -> T:
    """`asyncio.run(main)` on the loop `loop_factory(setting)` picks."""
    with asyncio.Runner(loop_factory=loop_factory(setting)) as runner:
        return runner.run(main)
