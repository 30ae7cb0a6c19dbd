"""A report table written three ways (Markdown for reading, CSV for pandas, LaTeX for a paper)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd


def write_table(table: pd.DataFrame, out: Path, stem: str, caption: str) -> list[Path]:
    """A table as Markdown, CSV and LaTeX."""
    paths = [out / f"{stem}.md", out / f"{stem}.csv", out / f"{stem}.tex"]
    paths[0].write_text(f"{caption}\n\n{to_markdown(table)}\n", encoding="utf-8")
    table.to_csv(paths[1], index=False)
    latex = table.to_latex(
        index=False, float_format="%.2f", na_rep="--", caption=caption, label=f"tab:{stem}"
    )
    paths[2].write_text(latex, encoding="utf-8")
    return paths


def to_markdown(table: pd.DataFrame) -> str:
    def cell(v: object) -> str:
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):  # never "<NA>"
            return "--"
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)
