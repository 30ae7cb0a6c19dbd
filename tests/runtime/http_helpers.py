"""Helpers for the HTTP server tests: `tokenrouter serve` as a real subprocess on a free port, its clean
stop (no subserver process or socket directory left behind), and SSE parsing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tokenrouter.server.ready import ready_url

ROOT = Path(__file__).resolve().parents[2]
SIM = ["models=sim-r2r", "models.members.0.sim.latency_ms=1.0", "models.members.1.sim.latency_ms=2.0",
       "runtime.thresholds=[1,1]", "algorithm.route_prob=0.35"]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    tmp: Path  # its TMPDIR: where its socket directory lives

    def descendants(self) -> list[int]:
        return descendant_pids(self.proc.pid)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            for pid in [*self.descendants(), self.proc.pid]:
                _kill(pid)
            self.proc.wait(5)
            raise


def descendant_pids(pid: int) -> list[int]:
    """All live descendant pids (from /proc), so the tests can prove nothing is left behind."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_server(overrides: list[str], tmp: Path, timeout: float = 120.0, env: dict[str, str] | None = None) -> Server:
    """`tokenrouter serve` with `overrides` and TMPDIR=`tmp` (`env` added to this process's environment)."""
    env = {**os.environ, **(env or {}), "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "tokenrouter", "serve", "server.port=0", *overrides],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        url = ready_url(line)
        if url is not None:
            return Server(proc, url, tmp)
        if not line and proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
    proc.kill()
    raise AssertionError("server not ready in time")


def stop_cleanly(server: Server, sig: int) -> None:
    kids = server.descendants()
    assert kids, "the server should run its subservers as child processes"
    assert server.stop(sig) == 0
    assert not [p for p in kids if alive(p)], "subserver processes outlived the server"
    assert not list(server.tmp.glob("tokenrouter-*")), "socket directory left behind"


def sse_events(resp: httpx.Response) -> list[dict | str]:
    events: list[dict | str] = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events
