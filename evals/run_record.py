"""What a run dir's summary.json is: its metrics AND the resolved config that produced them, in one file.

Hydra rewrites a point's `.hydra/config.yaml` whenever a sweep or run is launched at it, before any lock is
taken, so a label read from there can belong to another run. summary.json is written once, atomically, by the
run that measured it, and carries its own config and that config's hash: resume compares the hash with the
config it was asked to run, and reports and results.csv label every row from it. A summary counts as a result
only when it validates (`problem` is None): a truncated, foreign, empty or tampered one is reported and skipped
by reports, and rerun by a sweep.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrouter.fsutil import atomic_write_text

SUMMARY_FILE = "summary.json"
SCHEMA_VERSION = 2  # 1: summaries without a config record (labelled from .hydra/config.yaml, untrustworthy)
# top-level config keys that say how to run a sweep, not what a run measures: changing them never makes a
# finished point stale
NOT_IDENTITY = ("resume", "objective")


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that decides what a run measures."""
    return {k: v for k, v in config.items() if k not in NOT_IDENTITY}


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the identity part of a resolved config, as canonical JSON (key order never matters)."""
    text = json.dumps(identity(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def write_summary(run_dir: Path, summary: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """summary.json = `summary` + the config record, written atomically; returns what was written."""
    record = {**summary, "schema_version": SCHEMA_VERSION, "config": config, "config_hash": config_hash(config)}
    atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(record, indent=2, default=str) + "\n")
    return record


# key -> (accepted types, may be null); bool is refused where a number is asked for
REQUIRED: dict[str, tuple[tuple[type, ...], bool]] = {
    "schema_version": ((int,), False),
    "config": ((dict,), False),
    "config_hash": ((str,), False),
    "num_requests": ((int,), False),
    "throughput_tok_s": ((int, float), True),
    "model_names": ((list,), False),
}


def validate(summary: Any) -> str | None:
    """Why `summary` (parsed JSON) is not a result this version can trust, or None when it is."""
    if not isinstance(summary, dict):
        return f"not a JSON object (got {type(summary).__name__})"
    for key, (types, nullable) in REQUIRED.items():
        if key not in summary:
            if key in ("schema_version", "config", "config_hash"):
                return f"no config record ({key!r} missing: written by an older tokenrouter, or not by bench)"
            return f"{key!r} missing"
        value = summary[key]
        if value is None and nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            return f"{key!r} is {value!r}, expected {' or '.join(t.__name__ for t in types)}"
    if summary["schema_version"] != SCHEMA_VERSION:
        return f"schema_version {summary['schema_version']} (this version reads {SCHEMA_VERSION})"
    if summary["num_requests"] < 0:
        return f"num_requests is {summary['num_requests']}"
    if config_hash(summary["config"]) != summary["config_hash"]:
        return "its config does not match its config_hash (edited or damaged)"
    return None


@dataclass(frozen=True)
class StoredSummary:
    """A summary.json as read back: the parsed record, or why it cannot be used."""

    path: Path
    summary: dict[str, Any] | None
    problem: str | None

    @property
    def exists(self) -> bool:
        return self.summary is not None or self.problem != "missing"


def read_summary(run_dir: Path) -> StoredSummary:
    """summary.json of `run_dir`, validated; never raises for a damaged file (the problem says what is wrong)."""
    path = run_dir / SUMMARY_FILE
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return StoredSummary(path, None, "missing")
    except UnicodeDecodeError as exc:
        return StoredSummary(path, None, f"not UTF-8 (byte {exc.start})")
    except json.JSONDecodeError as exc:
        return StoredSummary(path, None, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    except OSError as exc:
        return StoredSummary(path, None, f"unreadable ({exc.strerror or exc})")
    problem = validate(data)
    return StoredSummary(path, data if problem is None else None, problem)


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {"a.b.c": value} (lists and scalars kept as they are)."""
    if not isinstance(data, dict) or (prefix and not data):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_differences(recorded: dict[str, Any], requested: dict[str, Any], shown: int = 4) -> str:
    """`workload.output_tokens: 100 -> 200, seed: 0 -> 1` for the identity keys that differ (at most `shown`,
    then how many more)."""
    old, new = flat(identity(recorded)), flat(identity(requested))
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k, _ABSENT) != new.get(k, _ABSENT))
    parts = [f"{k}: {_show(old.get(k, _ABSENT))} -> {_show(new.get(k, _ABSENT))}" for k in keys[:shown]]
    if len(keys) > shown:
        parts.append(f"and {len(keys) - shown} more")
    return ", ".join(parts)


_ABSENT = object()


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
