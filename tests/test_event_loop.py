"""tokenrouter/event_loop.py: the front ends' loop is uvloop where installed, asyncio on request, and a bad
$TOKENROUTER_EVENT_LOOP is one line from every command before anything starts."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from tokenrouter import event_loop
from tokenrouter.errors import UserError

uvloop = pytest.importorskip("uvloop")


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


@pytest.mark.parametrize(("setting", "expected"), [("", uvloop.Loop), ("auto", uvloop.Loop), ("uvloop", uvloop.Loop),
                                                   (" AsyncIO ", asyncio.BaseEventLoop)])
def test_run_uses_the_loop_the_setting_names(monkeypatch, setting: str, expected: type) -> None:
    monkeypatch.setenv(event_loop.ENV, setting)
    got = event_loop.run(_loop_type())
    assert issubclass(got, expected)
    assert (got is uvloop.Loop) == (event_loop.loop_name() == "uvloop")


def test_an_explicit_setting_wins_over_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    assert event_loop.run(_loop_type(), "asyncio") is not uvloop.Loop
    assert event_loop.run(_loop_type()) is uvloop.Loop
    with pytest.raises(UserError, match="got 'trio'"):
        event_loop.loop_factory("trio")


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    monkeypatch.setenv(event_loop.ENV, "auto")
    assert event_loop.run(_loop_type()) is not uvloop.Loop
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    with pytest.raises(UserError, match="not installed"):
        event_loop.loop_factory()


def test_bad_setting_is_one_line_from_the_command(monkeypatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "trio")
    with pytest.raises(UserError, match="TOKENROUTER_EVENT_LOOP must be one of auto, uvloop, asyncio"):
        event_loop.loop_factory()
    done = subprocess.run([sys.executable, "-m", "tokenrouter", "serve", "models=sim-r2r", "server.port=0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["tokenrouter serve: error: $TOKENROUTER_EVENT_LOOP must be one of auto, "
                                        "uvloop, asyncio, got 'trio'"]
