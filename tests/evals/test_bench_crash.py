"""A run writes requests.jsonl as requests finish, and a crashed system ends the run with one clear error while
keeping every finished request (real processes: a TokenRouter subserver is killed mid-run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_incremental_requests_and_clear_crash(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenrouter", "bench", "models=sim-r2r", "system=tokenrouter",
         "workload.num_requests=200", "workload.output_tokens=20", "concurrency=2", f"hydra.run.dir={tmp_path}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _lines(requests) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        seen = _lines(requests)
        assert seen >= 3  # lines are on disk while the run is still going
        subservers = _children(proc.pid)
        assert len(subservers) == 2
        os.kill(subservers[-1], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert "crashed" in err and "requests recorded in" in err and "Traceback" not in err
    assert not (tmp_path / "summary.json").exists()
    rows = [json.loads(line) for line in requests.read_text().splitlines()]
    assert len(rows) >= seen
    assert any(r["finish_reason"] == "error" and "died" in r["error"] for r in rows)
    assert all(r["finish_reason"] != "error" for r in rows[: seen])
    for pid in subservers:  # no process left behind
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
