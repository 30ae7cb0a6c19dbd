"""Reading JSON-lines files of objects, with errors that name the file and line (prompt files, datasets)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenrouter.errors import UserError


def numbered_json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line is a UserError naming `path:line`."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{lineno}: expected a JSON object per line")
            yield lineno, row


def read_json_objects(path: Path) -> list[dict[str, Any]]:
    """Every object of a JSON-lines file, in order."""
    return [row for _, row in numbered_json_objects(path)]
