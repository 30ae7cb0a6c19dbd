"""Faults under a running `tokenrouter serve` (real server process, real subservers): a dead model is never
reported healthy and the server exits non-zero."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from .http_helpers import SIM, alive, start_server


def _wait(predicate, timeout: float, step: float = 0.02) -> float:
    """Seconds until `predicate()` held (AssertionError on timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        time.sleep(step)
    raise AssertionError(f"not within {timeout} s")


def test_dead_subserver_turns_health_503_at_once_and_the_server_exits_1(tmp_path: Path) -> None:
    server = start_server(SIM, tmp_path)
    try:
        assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
        kids = server.descendants()
        os.kill(kids[-1], signal.SIGKILL)
        health: dict = {}

        def unhealthy() -> bool:
            try:
                resp = httpx.get(f"{server.url}/health", timeout=2)
            except httpx.TransportError:  # already gone is also not healthy, but we want to see the 503
                return False
            health.update(resp.json(), code=resp.status_code)
            return resp.status_code == 503

        assert _wait(unhealthy, 2.0) < 0.5
        assert health["status"] == "unhealthy" and "subserver" in health["error"]
        assert server.proc.wait(15) == 1
        err = server.proc.stderr.read() if server.proc.stderr else ""
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("tokenrouter serve: error: subserver") and "died" in lines[-1], err
        assert "Traceback" not in err
        assert not [p for p in kids if alive(p)] and not list(tmp_path.glob("tokenrouter-*"))
    finally:
        if server.proc.poll() is None:
            server.stop(signal.SIGKILL)
