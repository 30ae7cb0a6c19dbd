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
