"""Report tables as Markdown: a missing value reads `--` whatever pandas holds for it (None, NaN, or a string or
integer column's `<NA>`)."""

from __future__ import annotations

import pandas as pd

from tokenrouter.evals.comparable import MISSING, value
from tokenrouter.evals.tables import to_markdown


def test_missing_values_are_dashes_never_na() -> None:
    table = pd.DataFrame({"thresholds": pd.array(["[1, 6]", None], dtype="string"),
                          "N": pd.array([4, None], dtype="Int64"), "ratio": [1.5, float("nan")]})
    text = to_markdown(table)
    assert "<NA>" not in text and "nan" not in text
    assert text.splitlines()[-1] == "| -- | -- | -- |"
    assert value(pd.NA) == MISSING and value(None) == MISSING and value(2) == 2


def test_markdown_and_latex_leave_out_empty_columns_csv_keeps_them(tmp_path) -> None:
    from tokenrouter.evals.tables import write_table

    table = pd.DataFrame({"N": [1, 4], "official tok/s": [None, float("nan")], "gain": [1.5, None]})
    md, csv, tex = write_table(table, tmp_path, "t", "caption")
    assert "official" not in md.read_text() and "official" not in tex.read_text()
    assert "| N | gain |" in md.read_text() and "| 4 | -- |" in md.read_text()
    assert list(pd.read_csv(csv).columns) == ["N", "official tok/s", "gain"]
