"""Where the project caches what it builds or measures (built models, trained routers, start-up profiles,
threshold plans): one directory every layer can reach without importing the code that fills it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$TOKENROUTER_CACHE, else ~/.cache/tokenrouter (created on first use)."""
    path = Path(os.environ.get("TOKENROUTER_CACHE") or Path.home() / ".cache" / "tokenrouter")
    path.mkdir(parents=True, exist_ok=True)
    return path
