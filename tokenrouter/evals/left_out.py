"""What each report left out and why: one line on stderr per reason as it happens, and, while `collecting`,
the same notes gathered for `left_out.md` / `.csv` and report.html's "Runs left out" table, so a run missing
from a figure is never silent.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

SHOWN_RUNS = 3  # run dirs named per note (the rest counted)


@dataclass(frozen=True)
class LeftOut:
    """Runs one report could not use, for one reason."""

    report: str
    runs: int
    why: str
    examples: str  # the first SHOWN_RUNS run dirs (parent/name), ", "-joined


_notes: ContextVar[list[LeftOut] | None] = ContextVar("left_out_notes", default=None)


def leave_out(report: str, runs: pd.DataFrame, why: str) -> None:
    """Note that `report` left out `runs` because `why` (one stderr line; kept while collecting)."""
    if runs.empty:
        return
    dirs = [str(Path(d).parent.name + "/" + Path(d).name) for d in runs.get("run_dir", pd.Series(dtype=str))]
    examples = ", ".join(dirs[:SHOWN_RUNS]) + (f", ... ({len(dirs) - SHOWN_RUNS} more)" if len(dirs) > SHOWN_RUNS else "")
    note = LeftOut(report=report, runs=len(runs), why=why, examples=examples)
    print(f"{report}: left out {note.runs} run(s): {why}", file=sys.stderr)
    notes = _notes.get()
    if notes is not None:
        notes.append(note)


@contextmanager
def collecting() -> Iterator[list[LeftOut]]:
    """Gather the notes of the reports run inside (they still go to stderr)."""
    notes: list[LeftOut] = []
    token = _notes.set(notes)
    try:
        yield notes
    finally:
        _notes.reset(token)


def table(notes: list[LeftOut]) -> pd.DataFrame:
    """The notes as a table: report, runs, why, run dirs."""
    return pd.DataFrame([{"report": n.report, "runs": n.runs, "why": n.why, "run dirs": n.examples} for n in notes])
