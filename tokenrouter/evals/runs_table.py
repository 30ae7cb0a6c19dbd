"""The runs table (`tokenrouter.evals.store.load_results`) as every report reads it: its column names and how a run or a model
pair is labelled (which runs a report may compare: `tokenrouter.evals.comparable`). Shared by the tables (`tokenrouter.evals.report`) and the
figures (`tokenrouter.evals.plots`), so neither imports the other's helpers.
"""

from __future__ import annotations

import json
import re

import pandas as pd

THROUGHPUT = "throughput_tok_s"
PER_REQUEST = "per_request_throughput_tok_s"
STEADY = "steady_throughput_tok_s"  # closed loop without the drain tail: what the throughput model predicts
PREDICTED = "predicted_throughput_tok_s"


def has(df: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The rows where all `columns` exist and are not null."""
    if any(c not in df for c in columns):
        return df.iloc[0:0]
    return df.dropna(subset=list(columns))


def server_of(row: pd.Series) -> str:
    """Where a run's models were served: "sglang" (real SGLang servers) or "tokenrouter" (ours)."""
    return "sglang" if row.get("server") == "sglang" else "tokenrouter"


def model_source(row: pd.Series, name: object) -> str | None:
    """Where model `name` of a run's set comes from (its member's `source`: a Hub id, a path, `tiny:large`; a
    weightless model: `sim`), from the run's config record (`cfg.models.members`, JSON); None when the config
    does not say."""
    members = row.get("cfg.models.members")
    try:
        members = json.loads(members) if isinstance(members, str) else members
    except ValueError:
        return None
    for member in members if isinstance(members, list) else []:
        if isinstance(member, dict) and member.get("name") == name:
            if member.get("source"):
                return str(member["source"])
            return "sim" if member.get("engine") == "sim" else None
    return None


def single_label(row: pd.Series) -> str:
    """A single-model run as tables and legends name it: `single (large: Qwen/Qwen3-8B)`, the model's role in
    its set and where its weights come from (`single (large)` where the config names no source)."""
    model = row.get("system_model")
    source = model_source(row, model)
    return f"single ({model}: {source})" if source else f"single ({model})"


def system_label(row: pd.Series) -> str:
    """The system column of a results table: the system's name, a single-model run's with its model."""
    return single_label(row) if row.get("system") == "single" else str(row.get("system"))


def series_label(row: pd.Series) -> str:
    """How a run is named in legends: the system, plus the algorithm or single model that sets it apart."""
    system = str(row.get("system"))
    where = " on SGLang" if server_of(row) == "sglang" else ""
    if system == "single":
        return f"{single_label(row)}{where}"
    if system == "query_routing":
        return f"query-level routing{where}"
    if system in ("tokenrouter", "lockstep", "std_serving") and pd.notna(row.get("algorithm")):
        return f"{system} ({row.get('algorithm')}){where}"
    return system


def pair_label(models: object) -> str:
    """ "qwen3-0.6b-8b" -> "0.6B/8B" (the paper's naming); other model sets keep their name."""
    match = re.search(r"(\d+(?:\.\d+)?)b-(\d+(?:\.\d+)?)b$", str(models))
    return f"{match.group(1)}B/{match.group(2)}B" if match else str(models)
