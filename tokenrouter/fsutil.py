"""Result files that survive crashes and concurrent writers: atomic writes and exclusive directory locks.

A resumed sweep trusts what it finds on disk (a point with a summary.json is done), so a file half-written by
a killed process must never be mistaken for a result, and two processes writing one run dir must not
interleave. Writes go to a temp file in the same directory, are fsynced, then renamed over the target
(readers see the old file or the new one, never a prefix); a directory is owned through an flock on a lock
file inside it, which the kernel drops when its holder dies, so a crash never leaves a stale lock behind.
Files are created with the process umask like any other file (results are written to be shared), and a
storage fault (ENOSPC, EROFS, EACCES) is a `StorageError`: one line naming the path and the errno.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenrouter.errors import StorageError, UserError

LOCK_FILE = ".tokenrouter.lock"
_held: set[Path] = set()  # directories this process holds: a nested lock on one of them is a no-op


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Replace `path` with `text` atomically: temp file in the same dir, fsync, os.replace, fsync the dir.
    An OSError of the storage -> StorageError naming `path` (the old file, if any, is left as it was)."""
    data = text.encode(encoding)  # an encoding error is a bug in the caller: raised before any file exists
    atomic_write_chunks(path, [data])


def atomic_write_chunks(path: str | Path, chunks: Iterable[bytes]) -> None:
    """atomic_write_text for a file written piece by piece, never whole in memory (a trace of a long serve)."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = _create_temp(path)
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise StorageError(path, exc) from None
    except BaseException:
        _discard(tmp)
        raise
    _fsync_dir(path.parent)


def _create_temp(path: Path) -> tuple[int, str]:
    """A new file beside `path`, opened exclusively with mode 0666 & ~umask (mkstemp would make it 0600)."""
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue


def _discard(tmp: str | None) -> None:
    if tmp is not None:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


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
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:  # read-only file system, no permission, disk full: one line, no traceback
        raise StorageError(exc.filename or directory, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise UserError(f"{what} {directory} is in use by another run ({holder}); wait for it to finish "
                            "or write elsewhere") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # the lock is held; only the pid (for the refusal message) is missing
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise StorageError(directory / LOCK_FILE, exc) from None
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
