"""How the front end starts helper interpreters (subservers, the threshold planner).

A fresh `python -m ...` (not fork: torch and zmq state must not be inherited; not multiprocessing: no pickle
and no re-import of the caller's __main__), with the caller's sys.path so that algorithms defined in the
caller's own modules import there too.
"""

from __future__ import annotations

import os
import sys


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
