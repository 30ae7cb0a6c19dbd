"""Errors the command line turns into one clear line and exit status 2 (bad input, not a bug)."""


class UserError(Exception):
    """Bad input from the user: a config, request, file or checkpoint. Printed as one line, exit 2."""


class CapacityError(UserError):
    """A request does not fit in an engine's KV pool (the clear alternative to an out-of-memory crash)."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (or its type): third-party errors shown as one clear line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
