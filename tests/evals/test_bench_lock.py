"""Two `tokenrouter bench` processes aimed at one directory: the second is refused at once with one line naming
the directory and the first one's pid, the first finishes intact, and a killed holder frees the directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tokenrouter.fsutil import LOCK_FILE

SIM = ["models=sim-r2r", "system=lockstep", "workload.output_tokens=12", "concurrency=3"]


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "tokenrouter", "bench", *args]


def wait_for_lines(path: Path, proc: subprocess.Popen, count: int = 2) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"no progress in {path}: {proc.communicate(timeout=5) if proc.poll() is not None else ''}")


def refused(argv: list[str], directory: Path, pid: int) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(directory) in lines[0] and f"pid {pid}" in lines[0] and "in use" in lines[0], lines[0]
    return took


def test_second_writer_is_refused_and_first_is_intact(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    first = subprocess.Popen(bench("-m", *SIM, "workload.num_requests=60", f"hydra.sweep.dir={sweep}"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(sweep / "0" / "requests.jsonl", first)
        # The holder pauses, locks held, while the others start and are refused: its run (~7 s) could otherwise
        # end before two CLI start-ups on a loaded machine. It then goes on and must finish intact.
        os.kill(first.pid, signal.SIGSTOP)
        try:
            took = refused(bench("-m", *SIM, "workload.num_requests=60", f"hydra.sweep.dir={sweep}"), sweep,
                           first.pid)
            # a single run aimed at the point the sweep is writing is refused too (the point's own lock)
            refused(bench(*SIM, "workload.num_requests=60", f"hydra.run.dir={sweep / '0'}"), sweep / "0", first.pid)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        _, err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    assert took < 15, took
    rows = [json.loads(line) for line in (sweep / "0" / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(60))  # one writer's requests, each once
    assert json.loads((sweep / "0" / "summary.json").read_text())["num_requests"] == 60
    assert (sweep / "results.csv").is_file()


def test_killed_holder_frees_the_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = subprocess.Popen(bench(*SIM, "workload.num_requests=400", f"hydra.run.dir={run_dir}"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_lines(run_dir / "requests.jsonl", first)
        assert (run_dir / LOCK_FILE).read_text().strip() == str(first.pid)
        os.kill(first.pid, signal.SIGKILL)  # no clean-up code runs; the kernel drops the lock
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    done = subprocess.run(bench(*SIM, "workload.num_requests=4", f"hydra.run.dir={run_dir}"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((run_dir / "summary.json").read_text())["num_requests"] == 4
    assert len((run_dir / "requests.jsonl").read_text().splitlines()) == 4  # started afresh
