"""The result store: benchmark run directories -> one pandas table (one row per run).

A run dir holds the resolved config (`.hydra/config.yaml` from Hydra, or `config.yaml`), `summary.json` and
`requests.jsonl`. Sweeps leave many of them under one folder, so directories are searched recursively for
`summary.json`. Rows carry short columns for what reports group by (system, algorithm, models, workload,
concurrency, thresholds, ...), every config value flattened as `cfg.<dotted.key>`, and every summary value
(nested ones flattened, e.g. `token_share.large`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from tokenrouter.errors import UserError
from tokenrouter.jsonl import read_json_objects

CONFIG_FILES = (".hydra/config.yaml", "config.yaml")


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every directory at or below `paths` that holds a summary.json, sorted, without duplicates."""
    found: set[Path] = set()
    for path in map(Path, paths):
        if not path.exists():
            raise UserError(f"{path} does not exist")
        if path.is_file():
            raise UserError(f"{path} is a file; give run directories (searched recursively for summary.json)")
        found.update(p.parent.resolve() for p in path.rglob("summary.json"))
    return sorted(found)


def load_config(run_dir: Path) -> dict[str, Any]:
    """The run's resolved config as plain data ({} when the run dir has none)."""
    from omegaconf import OmegaConf

    for name in CONFIG_FILES:
        path = run_dir / name
        if path.is_file():
            cfg = OmegaConf.load(path)
            try:
                return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
            except Exception:  # an interpolation that needs Hydra's resolvers: keep the raw text
                return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]
    return {}


def sweeper_choice(run_dir: Path) -> str | None:
    """The Hydra sweeper that made a sweep's run (`basic`: a grid; e.g. `optuna_pareto`: a search), from the
    run's .hydra/hydra.yaml, so a report can tell a search's frontier from a grid's; None outside a sweep."""
    import yaml

    path = run_dir / ".hydra" / "hydra.yaml"
    try:
        hydra = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("hydra") or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        return None
    if not isinstance(hydra, dict) or hydra.get("mode") == "RUN":  # a sweep's jobs: MULTIRUN, or null
        return None
    choice = ((hydra.get("runtime") or {}).get("choices") or {}).get("hydra/sweeper")
    return str(choice) if choice is not None else None


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
    if isinstance(thresholds, list) and thresholds and all(isinstance(t, int | float) for t in thresholds):
        return float(thresholds[-1])
    return None


def run_row(run_dir: Path) -> dict[str, Any]:
    """One run as a flat dict: short grouping columns, `cfg.*` config values, then summary values."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{run_dir / 'summary.json'}: invalid JSON ({exc.msg})") from None
    cfg = load_config(run_dir)

    def get(*keys: str) -> Any:
        node: Any = cfg
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    runtime = get("runtime") or {}
    row: dict[str, Any] = {
        "run_dir": str(run_dir),
        "experiment": get("experiment_name") or get("experiment"),
        "system": get("system", "name"),
        "algorithm": get("algorithm", "name"),
        "models": get("models", "name"),
        "workload": get("workload", "name"),
        "concurrency": get("concurrency"),
        "arrival": get("arrival"),
        "seed": get("seed"),
        "thresholds": json.dumps(runtime.get("thresholds")),
        "delayed_batching": runtime.get("delayed_batching"),
        "async": runtime.get("async"),
        "system_model": get("system", "model"),
        "strong_share": get("system", "strong_share"),
        "server": get("system", "server"),  # baselines on real SGLang servers: "sglang"
        "variant": get("ablation_variant") or get("variant"),
        "sweeper": sweeper_choice(run_dir),
    }
    row.update({f"cfg.{k}": v for k, v in flatten(cfg).items()})
    # the summary records what actually ran (effective N, thresholds resolved from `auto`): it wins
    row.update({k: v for k, v in flatten(summary).items() if v is not None or k not in row})
    resolved = summary.get("thresholds")
    row["threshold_large"] = _threshold_large(resolved if resolved is not None else runtime.get("thresholds"))
    return row


def load_results(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All runs found under `paths` as one DataFrame (one row per run)."""
    dirs = find_run_dirs(paths)
    if not dirs:
        raise UserError("no run directories found (no summary.json below the given paths)")
    return pd.DataFrame([run_row(d) for d in dirs])


def load_requests(run_dir: str | Path) -> pd.DataFrame:
    """A run's requests.jsonl as a DataFrame (one row per finished request)."""
    path = Path(run_dir) / "requests.jsonl"
    if not path.is_file():
        raise UserError(f"{run_dir}: no requests.jsonl")
    return pd.DataFrame(read_json_objects(path))  # a line cut short names the file and line
