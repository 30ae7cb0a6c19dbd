"""The guard around every call into a routing algorithm (a plugin: its bugs must fail only the requests of that
call): route()'s time budget, its result checked into model indices, and the one line a failed request reports.
Shared by the subservers and lock-step, so both blame the algorithm in the same words."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from tokenrouter import handoff
from tokenrouter.api import StepResult

ERROR_CHARS = 300  # an algorithm's error as a client sees it: one line, at most this long


class RouteOverBudget(BaseException):
    """Raised into a route() call that ran past runtime.route_timeout_s. A BaseException, so that a plugin's own
    `except Exception` cannot swallow it."""


class RouteClock:
    """runtime.route_timeout_s: a one-shot SIGALRM timer armed around each route() call but the process's first
    interrupts one that runs past the budget (a sleep, a Python loop; code stuck inside one C call is interrupted when it returns to
    Python). Two setitimer calls per step. Where signals cannot be handled (a subserver off the main thread, in a
    benchmark) and where a plugin swallowed the interrupt, the call's duration is checked after it returns. Another
    user of the timer in the process (a test runner's timeout) keeps its deadline and its handler."""

    def __init__(self, budget_s: float, interrupt: bool = True) -> None:
        """`interrupt=False`: never arm the timer, check the duration only (a caller off the main thread, whose
        interrupt would land on the main thread's code instead)."""
        self.budget_s = budget_s
        self._first = True  # the first call is not timed: lazy start-up (CUDA handles, compiled kernels) is not a bug
        self._armed = False
        self._timer = interrupt and budget_s > 0 and threading.current_thread() is threading.main_thread()
        self._previous: Any = None
        if self._timer:
            self._previous = signal.signal(signal.SIGALRM, self._expired)

    def _expired(self, signum: int, frame: Any) -> None:
        if self._armed:  # a signal that lands after the call returned is not ours
            self._armed = False
            raise RouteOverBudget
        if callable(self._previous):
            self._previous(signum, frame)

    @property
    def overrun(self) -> str:
        """What a route() call past the budget fails its requests with."""
        return f"route() ran past runtime.route_timeout_s={self.budget_s:g} s"

    def call(self, route: Callable[[StepResult], Any], step: StepResult) -> Any:
        """`route(step)`, or RouteOverBudget if it ran past the budget."""
        if self.budget_s <= 0 or self._first:
            self._first = False
            return route(step)
        start = time.perf_counter()
        other = 0.0
        if self._timer:
            self._armed = True
            other = signal.setitimer(signal.ITIMER_REAL, self.budget_s)[0]
        try:
            dests = route(step)
        except Exception:
            if time.perf_counter() - start > self.budget_s:  # slow, then failed: over budget all the same (a
                raise RouteOverBudget from None  # caller that retries a failed call must not wait that long again)
            raise
        finally:
            if self._timer:
                try:
                    self._armed = False  # our signal can still land just before this: it raises, and then ...
                finally:  # ... the other user's timer is put back all the same
                    later = max(other - (time.perf_counter() - start), 1e-6) if other else 0.0
                    signal.setitimer(signal.ITIMER_REAL, later)
        if time.perf_counter() - start > self.budget_s:
            raise RouteOverBudget
        return dests


def destinations(dests: Any, count: int, num_models: int) -> list[int]:
    """route()'s result as one model index (a plain int) per request, or ProtocolError saying what is wrong with
    it. `bytes()` checks every element in C (an integer, numpy's and torch's included, in [0, 256)): ~2 us for a
    batch of 256, where a Python loop over the requests would cost several times that on every step."""
    try:
        dests = dests if type(dests) is list else list(dests)
    except TypeError:
        raise handoff.ProtocolError(f"route() returned {type(dests).__name__}, not a list of model indices") from None
    if len(dests) != count:
        raise handoff.ProtocolError(f"route() returned {len(dests)} destinations for {count} requests")
    try:
        packed = bytes(dests)
    except (TypeError, ValueError):
        packed = None
    if packed is not None and (not packed or max(packed) < num_models):
        return list(packed)
    indices = [_index(d) for d in dests]
    bad = next((d for d in indices if not 0 <= d < num_models), None)
    if bad is not None:
        raise handoff.ProtocolError(f"route() returned destination {bad} ({num_models} models)")
    return indices  # more than 256 models


def _index(dest: Any) -> int:
    try:
        return int(dest.__index__())
    except (AttributeError, TypeError, ValueError, RuntimeError):  # a float, a string, a float tensor
        raise handoff.ProtocolError(f"route() returned destination {dest!r:.40}, not a model index") from None


def one_line(text: str, limit: int = ERROR_CHARS) -> str:
    """`text` on one line, at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def handoff_loop(stalled: int) -> str:
    """What a request handed off runtime.max_handoffs_per_token times without a committed token fails with."""
    return f"the request was handed off {stalled} times without a committed token (runtime.max_handoffs_per_token)"


def algorithm_error(algorithm: str, model: str, what: str) -> str:
    """The one line a request failed by the routing algorithm reports (the client sees it in a 500)."""
    return one_line(f"routing algorithm {algorithm!r} failed on model {model!r}: {what}")


def call_failure(call: str, exc: Exception) -> str:
    """What went wrong in plugin call `call` (e.g. `send()`): a ProtocolError says it itself."""
    return str(exc) if isinstance(exc, handoff.ProtocolError) else f"{call} raised {type(exc).__name__}: {exc}"
