"""Where a result came from, recorded in every summary.json: a figure that cannot be traced to a commit, the
package versions, the devices and the command that made it cannot be rerun or trusted a year later."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tokenrouter import event_loop

PACKAGES = ("tokenrouter", "torch", "transformers", "sglang", "pyzmq", "hydra-core", "uvloop")
_REPO = Path(__file__).resolve().parents[2]
COMMAND_ENV = "TOKENROUTER_COMMAND"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _devices(model_devices: list[str]) -> dict[str, str]:
    """Each device the models asked for, by name (CUDA devices only where torch is already imported)."""
    names: dict[str, str] = {}
    torch = sys.modules.get("torch")
    for device in dict.fromkeys(model_devices):
        if device.startswith("cuda") and torch is not None and torch.cuda.is_available():
            names[device] = torch.cuda.get_device_name(torch.device(device))
        else:
            names[device] = platform.processor() or platform.machine()
    return names


def provenance(model_devices: list[str]) -> dict[str, Any]:
    """Date, git commit and dirty flag, package versions, devices, host, the front end's event loop and the
    command line of this run."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "packages": {p: v for p in PACKAGES if (v := _version(p)) is not None},
        "python": platform.python_version(),
        "devices": _devices(model_devices),
        "host": socket.gethostname(),
        "event_loop": event_loop.loop_name(),
        "command": command(),
    }


def command() -> list[str]:
    """The command line that made the run: the one `tokenrouter bench` passes down in $TOKENROUTER_COMMAND
    (a JSON list, set in the job by Hydra, so a launcher's worker process records the user's command rather
    than its own, e.g. Ray's default_worker.py), else this process's."""
    try:
        argv = json.loads(os.environ.get(COMMAND_ENV, "null"))
    except ValueError:
        argv = None
    if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
        return argv
    return [Path(sys.argv[0]).name, *sys.argv[1:]]
