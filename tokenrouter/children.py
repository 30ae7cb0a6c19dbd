"""How the runtime starts helper interpreters (subservers, tensor-parallel ranks, the threshold planner) and
keeps them from outliving their parent.

A fresh `python -m ...` (not fork: torch and zmq state must not be inherited; not multiprocessing: no pickle
and no re-import of the caller's __main__), with the caller's sys.path so that algorithms defined in the
caller's own modules import there too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def die_with_parent() -> None:
    """Linux: get SIGTERM if the parent process dies, even by SIGKILL (no orphans)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: callers also watch their parent pid
        pass
