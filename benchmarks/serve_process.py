"""`tokenrouter serve` as a child process for the HTTP benchmarks: started, its ready URL read, its later output
drained (a full stdout pipe would block the server's logging and so the server)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tokenrouter.server.ready import ready_url

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300.0


def start_server(overrides: list[str], who: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """The server process (`env` added to this one's) and its base URL, once it printed its ready line; exits
    naming `who` otherwise."""
    proc = subprocess.Popen([sys.executable, "-m", "tokenrouter", "serve", *overrides], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        url = ready_url(line)
        if url is not None:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, url
        if not line and proc.poll() is not None:
            sys.exit(f"{who}: the server exited with {proc.returncode} before it was ready")
    proc.kill()
    sys.exit(f"{who}: the server was not ready in time")
