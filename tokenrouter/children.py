"""How the runtime starts helper interpreters (subservers, tensor-parallel ranks, the threshold planner) and
keeps them from outliving their parent.

A fresh `python -m ...` (not fork: torch and zmq state must not be inherited; not multiprocessing: no pickle
and no re-import of the caller's __main__), with the caller's sys.path so that algorithms defined in the
caller's own modules import there too. A child's config crosses as one typed msgpack blob on its stdin (`spawn`),
encoded once by the parent and decoded once, into the same types, by the child (`decode_config`): no pickle of
our objects, and no re-parsing of dicts downstream.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import TypeVar

import msgspec

from tokenrouter.errors import UserError

T = TypeVar("T")


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


def spawn(module: str, config: object) -> subprocess.Popen:
    """Start `python -m module` with `config` (a msgspec Struct or dataclass) as msgpack on its stdin."""
    blob = msgspec.msgpack.encode(config)
    proc = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, env=child_env())
    assert proc.stdin is not None
    proc.stdin.write(blob)
    proc.stdin.close()
    return proc


def decode_config(blob: bytes, kind: type[T]) -> T:
    """The child's side of `spawn`: the blob as `kind` (its types' own checks run once, here), or one line."""
    try:
        return msgspec.msgpack.decode(blob, type=kind)
    except (msgspec.MsgspecError, UserError, TypeError, ValueError) as exc:
        raise UserError(f"malformed {kind.__name__} on stdin ({len(blob)} bytes): {exc}") from None
