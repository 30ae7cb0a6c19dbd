"""Stand-ins for Hub data sets (`rehearse`): a few rows in the columns the workload's loader reads.

Why: a rehearsal runs a GPU experiment's workload loader, prompt template, chat template and grading on CPU
without the Hub; the rows carry every column `workload.fields` names (a list-valued role: one column each),
so a renamed or missing column fails here as it would on the real data set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenrouter.evals.datasets import cfg_get
from tokenrouter.evals.loaders import AGENTIC_FIELDS, CHOICE_FIELDS, MATH_FIELDS

# record loader -> the columns it reads by default
DEFAULT_FIELDS = {"math": MATH_FIELDS, "choice": CHOICE_FIELDS, "agentic": AGENTIC_FIELDS}


def needs_stand_in(workload: Any) -> bool:
    """Whether the workload reads a Hub data set (a record loader, no local `path`)."""
    loader = str(cfg_get(workload, "loader") or cfg_get(workload, "name"))
    return loader in DEFAULT_FIELDS and not cfg_get(workload, "path") and bool(cfg_get(workload, "hub_id"))


def write_stand_in_rows(workload: Any, rows: int, path: Path) -> Path:
    """`rows` rows as JSONL at `path`, with every column the workload's loader reads."""
    loader = str(cfg_get(workload, "loader") or cfg_get(workload, "name"))
    given = cfg_get(workload, "fields", {}) or {}
    fields = {**DEFAULT_FIELDS[loader], **{k: v for k, v in dict(given).items()}}
    lines = [json.dumps(_row(loader, fields, i)) for i in range(rows)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _row(loader: str, fields: dict[str, Any], i: int) -> dict[str, Any]:
    a, b = 2 + i, 3 + i
    if loader == "agentic":
        turns = [{"role": "user", "content": f"add {a} and {b}"}, {"role": "assistant", "content": str(a + b)}]
        return {str(fields["messages"]): turns}
    row: dict[str, Any] = {}
    for role, column in fields.items():
        for name in ([column] if isinstance(column, str) else list(column or [])):
            row[str(name)] = str(a + b) if role in ("answer", "correct") else \
                f"What is {a}+{b}?" if role == "question" else f"{a + b + 1 + len(row)}"
    return row
