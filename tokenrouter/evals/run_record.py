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
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrouter.evals.machine import valid as machine_valid
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
    return _labels_problem(summary) or _fields_problem(summary)


def _config_labels(config: dict[str, Any]) -> dict[str, Any]:
    """The summary's labels as its (hashed) config says they must be."""
    def node(key: str) -> dict[str, Any]:
        value = config.get(key)
        return value if isinstance(value, dict) else {}

    return {"system": node("system").get("name"), "model_set": node("models").get("name"),
            "algorithm": config.get("algorithm"), "experiment": config.get("experiment_name"),
            "arrival": config.get("arrival", "closed_loop")}


def _labels_problem(summary: dict[str, Any]) -> str | None:
    """A label that reports group by must be the one the hashed config gives (the config is what was run)."""
    for key, expected in _config_labels(summary["config"]).items():
        if key in summary and summary[key] != expected:
            return f"{key!r} is {_show(summary[key])} but its config says {_show(expected)}"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _share(value: Any) -> bool:
    return value is None or (_is_number(value) and 0 <= value <= 1)


def _thresholds(value: Any) -> bool:
    return value is None or isinstance(value, str) or (
        isinstance(value, list) and all(_count(v) or v is None or isinstance(v, list) for v in value))


# summary fields a report or results.csv reads, with what each must be when present (None: missing value)
FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "concurrency": (lambda v: _count(v) and v >= 1, "an integer >= 1"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "request_rate": (lambda v: v is None or (_is_number(v) and v > 0), "a number > 0 or null"),
    "delayed_batching": (lambda v: isinstance(v, bool), "true or false"),
    "workload": (lambda v: isinstance(v, str), "text"),
    "tp": (lambda v: isinstance(v, str), "text"),
    "sweeper": (lambda v: v is None or isinstance(v, str), "text or null"),
    "thresholds": (_thresholds, "a list of integers, text or null"),
    "thresholds_spec": (_thresholds, "a list of integers, text or null"),
    "model_names": (lambda v: all(isinstance(n, str) for n in v), "a list of model names"),
    "tokens_per_model": (lambda v: isinstance(v, dict) and all(_count(c) for c in v.values()),
                         "a mapping of model name to token count"),
    "token_share": (lambda v: isinstance(v, dict) and all(map(_share, v.values())),
                    "a mapping of model name to a share in [0, 1]"),
    "accuracy": (_share, "a share in [0, 1] or null"),
    "large_token_share": (_share, "a share in [0, 1] or null"),
    "errors": (_count, "a count"),
    "output_tokens": (_count, "a count"),
    "prompt_tokens": (_count, "a count"),
    "machine": (machine_valid, "the machine's state: cores >= 1, load averages and CPU shares "
                "(numbers >= 0 or null, shares <= 1), step_ms per model (tokenrouter/evals/machine.py)"),
}

# every other top-level scalar named like a measurement: a finite number >= 0, or null
MEASURED_SUFFIXES = ("_s", "_ms", "_tok_s", "_throughput", "_per_request")


def _fields_problem(summary: dict[str, Any]) -> str | None:
    for key, value in summary.items():
        if key in FIELDS:
            ok, what = FIELDS[key]
            if not ok(value):
                return f"{key!r} is {_show(value)}, expected {what}"
        elif key.endswith(MEASURED_SUFFIXES) and not isinstance(value, dict | list) \
                and not (value is None or (_is_number(value) and value >= 0)):
            return f"{key!r} is {_show(value)}, expected a number >= 0 or null"
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
