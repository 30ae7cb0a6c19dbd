"""Socket directories: a SIGKILLed front end leaves its private directory behind (nothing runs to clean it);
the next start removes exactly the directories whose owner process is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tokenrouter.runtime.ipc import OWNER_FILE, _process_id, remove_stale_dirs

from .test_runtime_reliability import SCRIPT, _gone


def _dir(base: Path, name: str, owner: str | None) -> Path:
    path = base / f"tokenrouter-{name}"
    path.mkdir(mode=0o700)
    if owner is not None:
        (path / OWNER_FILE).write_text(owner)
    return path


def test_only_directories_of_dead_or_recycled_owners_are_removed(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    me = _process_id(os.getpid())
    assert me is not None
    dead = _dir(tmp_path, "dead", f"{done.pid} 12345")
    recycled = _dir(tmp_path, "recycled", f"{os.getpid()} 1")  # our pid, another process's start time
    alive = _dir(tmp_path, "alive", me)
    unowned = _dir(tmp_path, "unowned", None)  # being made right now, or not ours to judge
    other = tmp_path / "unrelated"
    other.mkdir()
    assert sorted(remove_stale_dirs(tmp_path)) == sorted([dead, recycled])
    assert alive.is_dir() and unowned.is_dir() and other.is_dir()
    assert not dead.exists() and not recycled.exists()


def test_sigkilled_front_end_dir_is_removed_by_the_next_start(tmp_path: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TMPDIR": str(tmp_path)}

    def start() -> tuple[subprocess.Popen, dict]:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        return proc, json.loads(line)

    first, info = start()
    first.send_signal(signal.SIGKILL)
    first.wait()
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in info["pids"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in info["pids"])  # subservers follow their parent (PDEATHSIG)
    # they also remove its socket directory on their way out; one left behind (subservers killed as well)
    # is removed by the next start
    Path(info["dir"]).mkdir(exist_ok=True)
    (Path(info["dir"]) / "owner").write_text(f"{first.pid} 1")
    second, info2 = start()
    try:
        assert not Path(info["dir"]).exists() and Path(info2["dir"]).is_dir()
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)
    assert not Path(info2["dir"]).exists()
