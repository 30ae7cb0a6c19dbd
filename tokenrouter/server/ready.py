"""The line `tokenrouter serve` prints on stdout once it accepts connections, and how a parent reads it.

Why a protocol of its own: the server binds port 0 (no free-port race), so this line is the only way the
process that started it (Std. Serving's model servers, tests, the fuzz run) learns where it listens.
"""

from __future__ import annotations

READY_PREFIX = "tokenrouter serve: ready on "


def ready_line(url: str, detail: str) -> str:
    """`tokenrouter serve: ready on URL (DETAIL)`: the URL first, so a parent needs no more than the prefix."""
    return f"{READY_PREFIX}{url} ({detail})"


def ready_url(line: str) -> str | None:
    """The URL of a ready line; None for any other line of the server's output."""
    if not line.startswith(READY_PREFIX):
        return None
    return line[len(READY_PREFIX):].split()[0]
