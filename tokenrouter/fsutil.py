"""Result files that survive crashes and concurrent writers: atomic writes and exclusive directory locks.

A resumed sweep trusts what it finds on disk (a point with a summary.json is done), so a file half-written by
a killed process must never be mistaken for a result, and two processes writing one run dir must not
interleave. Writes go to a temp file in the same directory, are fsynced, then renamed over the target
(readers see the old file or the new one, never a prefix); a directory is owned through an flock on a lock
file inside it, which the kernel drops when its holder dies, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tokenrouter.errors import UserError

LOCK_FILE = ".tokenrouter.lock"
_held: set[Path] = set()  # directories this process holds: a nested lock on one of them is a no-op


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Replace `path` with `text` atomically: temp file in the same dir, fsync, os.replace, fsync the dir."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (a no-op where directories cannot be opened, e.g. some network mounts)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked_dir(directory: str | Path, what: str = "directory") -> Iterator[Path]:
    """Hold `directory` (created if missing) exclusively for the block; another holder -> UserError naming the
    directory and its pid. Re-entrant within one process."""
    directory = Path(directory).resolve()
    if directory in _held:
        yield directory
        return
    if directory.exists() and not directory.is_dir():
        raise UserError(f"{what} {directory} is a file, expected a directory")
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise UserError(f"{what} {directory} is in use by another run ({holder}); wait for it to finish "
                            "or write elsewhere") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _held.add(directory)
        try:
            yield directory
        finally:
            _held.discard(directory)
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _holder(fd: int) -> str:
    """'pid N' from the lock file (written by the holder once it got the lock), else 'pid unknown'."""
    try:
        text = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"
