"""Errors the command line turns into one clear line and exit status 2 (bad input, not a bug)."""

from __future__ import annotations

from collections.abc import Iterable


class UserError(Exception):
    """Bad input from the user: a config, request, file or checkpoint. Printed as one line, exit 2."""


class CapacityError(UserError):
    """A request does not fit in an engine's KV pool (the clear alternative to an out-of-memory crash)."""


class StorageError(Exception):
    """A result file or directory could not be written (disk full, read-only file system, no permission):
    one line naming the path and the errno, exit status 1 (the input was fine; the storage was not)."""

    def __init__(self, path: object, exc: OSError) -> None:
        import errno as errno_names

        code = errno_names.errorcode.get(exc.errno or 0, f"errno {exc.errno}")
        self.path, self.errno = str(path), exc.errno
        super().__init__(f"cannot write {path}: {exc.strerror or exc} ({code})")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (or its type): third-party errors shown as one clear line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def did_you_mean(name: str, known: Iterable[str], cutoff: float = 0.6) -> str:
    """` (did you mean 'concurrency'?)` for the known name nearest `name`, or "" when none is near."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""
