"""Rows of a workload's data set, from a local file (`workload.path`) or from its Hugging Face Hub id.

Local files let every workload run without the Hub (CI, air-gapped clusters) and let users bring their own
copy; the Hub path keeps the paper's default data sets one override away. Either way the loaders see plain
dicts, and a missing column fails once, up front, naming the field and the file.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrouter.errors import UserError
from tokenrouter.jsonl import read_json_objects

FORMATS = (".jsonl", ".json", ".parquet", ".csv")


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """`cfg.key` for an OmegaConf node or a dict, `default` when absent or null."""
    value = cfg.get(key, default) if hasattr(cfg, "get") else default
    return default if value is None else value


def load_records(cfg: Any) -> tuple[list[dict[str, Any]], str]:
    """The selected rows of the workload's data set (`workload.indices`, then the first `workload.limit`) and
    a name for the source (file path or Hub id) for error messages. Each row gains `_row`, its row number."""
    name = cfg_get(cfg, "name", "workload")
    indices = cfg_get(cfg, "indices")
    limit = cfg_get(cfg, "limit")
    if limit is not None and int(limit) < 1:
        raise UserError(f"workload {name}: limit must be >= 1, got {limit}")
    path = cfg_get(cfg, "path")
    if path:
        table, source = read_file(Path(str(path)).expanduser(), name), str(path)
    else:
        hub_id = cfg_get(cfg, "hub_id")
        if not hub_id:
            raise UserError(
                f"workload {name}: set workload.path=FILE (JSONL, Parquet or CSV); it has no Hub default"
            )
        # streaming reads only the rows needed (the agentic traces are GBs); else the whole split is fetched
        needed = max(map(int, indices)) + 1 if indices else (int(limit) if limit is not None else None)
        hub = HubSource(str(hub_id), cfg_get(cfg, "subset"), str(cfg_get(cfg, "split", "train")))
        table, source = _read_hub(hub, name, needed if cfg_get(cfg, "streaming", False) else None), hub_id
    selected = list(range(len(table)))
    if indices is not None:
        bad = [i for i in indices if not 0 <= int(i) < len(table)]
        if bad:
            raise UserError(f"workload {name}: indices {bad} out of range for {source} ({len(table)} rows)")
        selected = [int(i) for i in indices]
    if limit is not None:
        selected = selected[: int(limit)]
    return [{**dict(table[i]), "_row": i} for i in selected], str(source)


def read_file(path: Path, name: str) -> list[dict[str, Any]]:
    """Rows of a JSONL / JSON-list / Parquet / CSV file (CSV cells stay strings, so answers keep their text)."""
    if path.is_dir():
        raise UserError(f"workload {name}: workload.path {path} is a directory, expected a file "
                        f"({', '.join(FORMATS)})")
    if not path.is_file():
        raise UserError(f"workload {name}: data file {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            return read_json_objects(path)
        if suffix == ".json":
            return _read_json(path)
        if suffix == ".parquet":
            import pandas as pd

            return pd.read_parquet(path).to_dict(orient="records")
        if suffix == ".csv":
            import pandas as pd

            return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict(orient="records")
    except UserError:
        raise
    except Exception as exc:  # a corrupt file: say which and why, in one line
        raise UserError(f"workload {name}: cannot read {path}: {_one_line(exc)}") from None
    raise UserError(
        f"workload {name}: {path} has unsupported format {suffix!r}; use one of {', '.join(FORMATS)}"
    )


def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:  # many ".json" data files are really JSON lines
        return read_json_objects(path)
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise UserError(f"{path}: expected a JSON list of objects (or JSON lines)")
    return data


@dataclass(frozen=True)
class HubSource:
    hub_id: str
    subset: str | None
    split: str


def _read_hub(hub: HubSource, name: str, stream_rows: int | None) -> Any:
    """A `datasets.Dataset` (indexable; rows are materialized only when selected), or with `stream_rows` the
    first that many rows read by streaming, without downloading the whole split."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - a declared dependency
        raise UserError(
            f"workload {name}: the `datasets` package is needed for Hub data; or set workload.path"
        ) from None
    try:
        if stream_rows is not None:
            stream = datasets.load_dataset(hub.hub_id, hub.subset, split=hub.split, streaming=True)
            return [dict(row) for row in itertools.islice(stream, stream_rows)]
        return datasets.load_dataset(hub.hub_id, hub.subset, split=hub.split)
    except Exception as exc:
        raise UserError(
            f"workload {name}: cannot load Hub dataset {hub.hub_id!r} (subset={hub.subset}, split={hub.split}): "
            f"{_one_line(exc)}; offline? download it elsewhere and set workload.path=FILE (JSONL, Parquet or CSV)"
        ) from None


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def require_fields(records: list[dict[str, Any]], fields: dict[str, str], source: str, name: str) -> None:
    """Fail before any work when a configured column is absent: `fields` maps role -> column name."""
    if not records:
        raise UserError(f"workload {name}: {source} has no rows")
    for row_no, row in enumerate(records):
        for role, column in fields.items():
            if column not in row:
                raise UserError(
                    f"workload {name}: field {column!r} (workload.fields.{role}) missing in {source} "
                    f"row {row_no}; columns there: {sorted(row)[:20]}"
                )
