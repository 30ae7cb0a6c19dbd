"""The guard around routing-plugin calls (runtime/plugin_guard.py): route()'s results checked into model indices,
its time budget, the one-line errors."""

from __future__ import annotations

import re
import signal
import time

import pytest

from tokenrouter.handoff import ProtocolError
from tokenrouter.runtime.plugin_guard import (
    RouteClock,
    RouteOverBudget,
    algorithm_error,
    call_failure,
    destinations,
)


def test_route_results_become_model_indices_or_a_line_saying_what_is_wrong() -> None:
    """A float destination passed the range check and killed the subserver at
    `routes[dest] += 1`. Integers of any kind (numpy, torch, bool) are taken as plain ints."""
    import numpy as np
    import torch

    assert destinations([True, 0], 2, 2) == [1, 0] and destinations(np.array([1, 0]), 2, 2) == [1, 0]
    assert destinations(torch.tensor([0, 1]), 2, 2) == [0, 1] and destinations(iter([1]), 1, 2) == [1]
    for bad, words in [([1.5, 0], "destination 1.5, not a model index"), ([0, 7], "destination 7 (2 models)"),
                       ([-1, 0], "destination -1"), ("01", "destination '0'"), (None, "returned NoneType"),
                       ([0], "1 destinations for 2 requests"), (torch.tensor([0.5, 1.0]), "tensor(0.5000)")]:
        with pytest.raises(ProtocolError, match=re.escape(words)):
            destinations(bad, 2, 2)


def test_the_route_clock_interrupts_a_route_past_its_budget() -> None:
    """A route() that sleeps is cut at the budget (SIGALRM on the main thread); one that swallows
    the interrupt, or runs where no timer can be armed, is caught when it returns; none leaves its timer armed
    (pytest-timeout's, if running, stays as it was)."""
    other = signal.getitimer(signal.ITIMER_REAL)[0]
    t0 = time.perf_counter()

    def untouched() -> bool:
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        return left == 0.0 if other == 0.0 else abs(left - (other - (time.perf_counter() - t0))) < 0.1

    clock = RouteClock(0.05)
    assert clock.call(lambda step: time.sleep(0.1) or [0], None) == [0]  # the first call is not timed (start-up)
    with pytest.raises(RouteOverBudget):
        clock.call(lambda step: time.sleep(5), None)
    assert time.perf_counter() - t0 < 3.0 and untouched()  # cut at 0.05 s, not after the 5 s sleep

    def stubborn(step: object) -> list[int]:
        try:
            time.sleep(5)
        except BaseException:  # a plugin that swallows everything
            time.sleep(0.06)
        return [0]

    with pytest.raises(RouteOverBudget):
        clock.call(stubborn, None)
    assert clock.call(lambda step: [1], None) == [1] and untouched()
    time.sleep(0.1)  # no late signal
    assert RouteClock(0).call(lambda step: [2], None) == [2]


def test_the_route_clock_keeps_another_timer_of_the_process() -> None:
    fired: list[int] = []
    before = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.6)
        clock = RouteClock(1.5)
        assert clock.call(lambda step: [0], None) == [0]  # the first call: untimed, the timer not touched
        assert clock.call(lambda step: [0], None) == [0]  # timed: armed for 1 s, then the other deadline put back
        assert 0.1 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.6  # still due, not cancelled or moved to 1.5 s
        time.sleep(1.0)
        assert fired == [signal.SIGALRM]  # handed to the handler it replaced
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def test_a_failed_call_is_one_line_that_blames_the_algorithm() -> None:
    error = algorithm_error("mine", "small", call_failure("send()", ValueError("bad\n  input")))
    assert error == "routing algorithm 'mine' failed on model 'small': send() raised ValueError: bad input"
    assert call_failure("route()", ProtocolError("route() returned 1 destinations for 2 requests")) == \
        "route() returned 1 destinations for 2 requests"  # it says itself what is wrong
    assert len(algorithm_error("mine", "small", "x" * 1000)) == 300 and "\n" not in algorithm_error("m", "s", "a\nb")


def test_a_route_that_is_slow_and_then_raises_is_over_budget() -> None:
    """Without the interrupt (lock-step's driver thread, Std. Serving's event loop) the duration decides, also for
    a call that raised: a caller that asks a failed route() again, request by request, must not wait again."""
    clock = RouteClock(0.5, interrupt=False)
    clock.call(lambda step: [0], None)

    def fails(step: object, after_s: float = 0.0) -> list[int]:
        time.sleep(after_s)
        raise ValueError("NaN")

    with pytest.raises(RouteOverBudget):
        clock.call(lambda step: fails(step, 0.7), None)
    with pytest.raises(ValueError, match="NaN"):  # a quick failure stays the plugin's own error
        clock.call(fails, None)
