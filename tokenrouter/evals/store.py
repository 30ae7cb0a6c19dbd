"""The result store: benchmark run directories -> one pandas table (one row per run).

A run dir holds `summary.json` (its metrics and, as their record, the resolved config that produced them:
`tokenrouter.evals.run_record`) and `requests.jsonl`. Sweeps leave many of them under one folder, so directories are
searched recursively for `summary.json` (dot directories, e.g. a point's `.superseded/` results, are not
runs). Every label comes from the summary's own config record, never from Hydra's `.hydra/config.yaml`, which
any later launch at the same dir rewrites. A damaged or foreign summary is skipped with one warning line
naming it. Rows carry short columns for what reports group by (system, algorithm, models, workload,
concurrency, thresholds, ...), every config value flattened as `cfg.<dotted.key>`, and every summary value
(nested ones flattened, e.g. `token_share.large`); the grouping columns have one type each (TYPES), whatever
mix of systems the runs come from.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from tokenrouter.errors import UserError
from tokenrouter.evals.run_record import SUMMARY_FILE, read_summary
from tokenrouter.jsonl import read_json_objects

# one dtype per grouping column, so a column never holds both numbers and text ("auto" beside 2.0): numbers
# are nullable numbers, labels are text with no-value as missing
TYPES = {
    "concurrency": "Int64",
    "seed": "Int64",
    "request_rate": "float64",
    "threshold_large": "float64",
    "thresholds": "string",
    "thresholds_spec": "string",
    "status": "string",
}


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every directory at or below `paths` that holds a summary.json, sorted, without duplicates (none inside a
    dot directory below a given path: `.superseded/` keeps replaced results, `.hydra/` is Hydra's)."""
    found: set[Path] = set()
    for path in map(Path, paths):
        if not path.exists():
            raise UserError(f"{path} does not exist")
        if path.is_file():
            raise UserError(f"{path} is a file; give run directories (searched recursively for summary.json)")
        for summary in path.rglob(SUMMARY_FILE):
            if not any(part.startswith(".") for part in summary.relative_to(path).parts[:-1]):
                found.add(summary.parent.resolve())
    return sorted(found)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {"a.b.c": scalar}; lists stay whole, as JSON text (so every cell is a scalar)."""
    if not isinstance(data, dict):
        return {prefix: json.dumps(data) if isinstance(data, list) else data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _threshold_large(thresholds: Any) -> float | None:
    """The last model's batch threshold when thresholds are one flat list (the knob the paper varies)."""
    if isinstance(thresholds, list) and thresholds and all(isinstance(t, int | float) and not isinstance(t, bool)
                                                           for t in thresholds):
        return float(thresholds[-1])
    return None


def thresholds_label(value: Any) -> str | None:
    """A thresholds value as one kind of text: a list as JSON ("[1, 2]"), "auto" as auto, none as missing."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def run_row(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """One run as a flat dict: short grouping columns, `cfg.*` config values, then summary values."""
    cfg = summary["config"]

    def get(*keys: str) -> Any:
        node: Any = cfg
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    runtime = get("runtime") or {}
    row: dict[str, Any] = {
        "run_dir": str(run_dir),
        "status": "ok",
        "experiment": get("experiment_name") or get("experiment"),
        "system": get("system", "name"),
        "algorithm": get("algorithm", "name"),
        "models": get("models", "name"),
        "workload": get("workload", "name"),
        "concurrency": get("concurrency"),
        "arrival": get("arrival"),
        "seed": get("seed"),
        "delayed_batching": runtime.get("delayed_batching"),
        "async": runtime.get("async"),
        "system_model": get("system", "model"),
        "strong_share": get("system", "strong_share"),
        "server": get("system", "server"),  # baselines on real SGLang servers: "sglang"
        "variant": get("ablation_variant") or get("variant"),
        "sweeper": summary.get("sweeper"),
    }
    row.update({f"cfg.{k}": v for k, v in flatten(cfg).items()})
    # the summary records what actually ran (effective N, thresholds resolved from `auto`): it wins
    measured = {k: v for k, v in summary.items() if k not in ("config", "config_hash")}
    row.update({k: v for k, v in flatten(measured).items() if v is not None or k not in row})
    # what ran (resolved from `auto`; missing for a system without thresholds, e.g. lock-step) and what was asked
    resolved = summary["thresholds"] if "thresholds" in summary else runtime.get("thresholds")
    row["thresholds"] = thresholds_label(resolved)
    row["thresholds_spec"] = thresholds_label(summary.get("thresholds_spec", runtime.get("thresholds")))
    row["threshold_large"] = _threshold_large(resolved)
    return row


def load_results(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All runs found under `paths` as one DataFrame (one row per run, TYPES applied). A summary that does
    not validate is skipped, with one line on stderr naming it and why."""
    dirs = find_run_dirs(paths)
    rows = []
    for run_dir in dirs:
        stored = read_summary(run_dir)
        if stored.summary is None:
            print(f"warning: skipping {stored.path}: {stored.problem}", file=sys.stderr)
            continue
        rows.append(run_row(run_dir, stored.summary))
    if not rows:
        raise UserError("no run directories found (no valid summary.json below the given paths)" if dirs else
                        "no run directories found (no summary.json below the given paths)")
    return typed(pd.DataFrame(rows))


def typed(df: pd.DataFrame) -> pd.DataFrame:
    """The runs table with TYPES applied to the columns it has."""
    for column, dtype in TYPES.items():
        if column in df:
            df[column] = df[column].astype(dtype)
    return df


def load_requests(run_dir: str | Path) -> pd.DataFrame:
    """A run's requests.jsonl as a DataFrame (one row per finished request)."""
    path = Path(run_dir) / "requests.jsonl"
    if not path.is_file():
        raise UserError(f"{run_dir}: no requests.jsonl")
    return pd.DataFrame(read_json_objects(path))  # a line cut short names the file and line
