"""Models the project builds itself: the tiny random pair for tests and the trained local pair for demos."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where built models and routers are cached: $TOKENROUTER_CACHE, else ~/.cache/tokenrouter."""
    path = Path(os.environ.get("TOKENROUTER_CACHE") or Path.home() / ".cache" / "tokenrouter")
    path.mkdir(parents=True, exist_ok=True)
    return path
