"""A report table written three ways (Markdown for reading, CSV for pandas, LaTeX for a paper).

Markdown and LaTeX leave out the columns empty in every row (a table of one system has no other system's
columns to read); the CSV keeps them all, so a script reading it finds the same columns in every report.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd


def write_table(table: pd.DataFrame, out: Path, stem: str, caption: str) -> list[Path]:
    """A table as Markdown, CSV and LaTeX."""
    paths = [out / f"{stem}.md", out / f"{stem}.csv", out / f"{stem}.tex"]
    table.to_csv(paths[1], index=False)
    table = without_empty_columns(table)
    paths[0].write_text(f"{caption}\n\n{to_markdown(table)}\n", encoding="utf-8")
    latex = table.to_latex(
        index=False, float_format="%.2f", na_rep="--", caption=caption, label=f"tab:{stem}"
    )
    paths[2].write_text(latex, encoding="utf-8")
    return paths


def present(v: Any) -> bool:
    """Whether a cell holds a value (None, NaN and pandas' NA and NaT do not)."""
    if v is None or v is pd.NA or v is pd.NaT:
        return False
    return not (isinstance(v, float) and math.isnan(v))


def without_empty_columns(table: pd.DataFrame) -> pd.DataFrame:
    """`table` less the columns empty in every row."""
    return table.loc[:, [c for c in table.columns if table[c].map(present).any()]]


def to_markdown(table: pd.DataFrame) -> str:
    def cell(v: object) -> str:
        if not present(v):  # never "<NA>"
            return "--"
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)
