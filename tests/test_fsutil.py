"""Atomic writes and directory locks with real processes: a writer killed at any moment leaves the old file or
the new one, never a prefix; a lock refuses a second holder by name and pid and dies with its holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenrouter.errors import UserError
from tokenrouter.fsutil import LOCK_FILE, atomic_write_text, locked_dir

WRITER = """
import sys
from tokenrouter.fsutil import atomic_write_text
path = sys.argv[1]
contents = ["a" * 2_000_000 + "\\n", "b" * 3_000_000 + "\\n"]
i = 0
while True:
    atomic_write_text(path, contents[i % 2])
    i += 1
"""

HOLDER = """
import sys, time
from tokenrouter.fsutil import locked_dir
with locked_dir(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_killed_writer_never_leaves_a_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)])
    try:
        deadline = time.monotonic() + 30
        while not target.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(50):  # a reader racing the writer only ever sees whole files
            text = target.read_text()
            assert text in ("a" * 2_000_000 + "\n", "b" * 3_000_000 + "\n")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert target.read_text()[-1] == "\n" and len(set(target.read_text()[:-1])) == 1


def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    atomic_write_text(target, "old\n")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(target, "new \udcff\n")  # fails half-way through writing
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_lock_refuses_second_holder_and_dies_with_the_first(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=f"run directory {tmp_path} is in use by another run \\(pid {proc.pid}\\)"):
            with locked_dir(tmp_path, "run directory"):
                pass
        os.kill(proc.pid, signal.SIGKILL)  # no cleanup runs: the kernel drops the flock
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with locked_dir(tmp_path) as held, locked_dir(tmp_path):  # free again, and re-entrant in one process
        assert held == tmp_path.resolve() and (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
