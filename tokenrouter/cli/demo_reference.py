"""The demo's committed reference (results/demo) and how a new run's figures sit beside it in demo.md.

Why: a rerun's throughputs move with the load of a shared CPU, so a reader needs the reference's figures next
to the new ones to tell a regression from noise; the demo never writes into the reference itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenrouter.evals.machine import REFERENCE_DIR


def load_reference(path: Path = REFERENCE_DIR) -> dict[str, Any] | None:
    """The reference run's figures (its demo.json), or None when there is none (e.g. outside a checkout)."""
    try:
        return json.loads((path / "demo.json").read_text())
    except (OSError, ValueError):
        return None


def _rows(f: dict[str, Any]) -> dict[str, str]:
    """Comparable figures of one run, by name."""
    rows = {}
    for name, acc in f.get("accuracy", {}).items():
        rows[f"{name} model alone: accuracy"] = f"{acc['accuracy']:.1%}"
    for name, ms in f.get("step_ms", {}).items():
        rows[f"{name} decode step ms (batch 1 / 8)"] = f"{ms['1']:.2f} / {ms['8']:.2f}"
    for r in f.get("lockstep", []):
        repeats = r.get("ratio per repeat") or []
        interval = r.get("interval")
        spread = (f" (95% {interval[0]:.2f}-{interval[1]:.2f}x)" if interval else
                  f" (min {min(repeats):.2f}x)" if len(repeats) > 1 else "")
        busy = ", contended" if r.get("contended") else ""
        rows[f"TokenRouter / lock-step, {r['algorithm']} {r['settings']}"] = f"{r['ratio']:.2f}x{spread}{busy}"
    for axis, verdict in f.get("frontier", {}).items():
        counts = f.get("frontier_points", {}).get(axis)
        rows[f"query-level points matched or beaten ({axis})"] = f"{counts[0]} of {counts[1]}" if counts else verdict
    if f.get("near_large"):
        rows["closest to the large model alone"] = f["near_large"]
    if "total" in f.get("phases", {}):
        rows["wall time (s)"] = f"{f['phases']['total']:.0f}"
    return rows


def comparison_lines(run: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """A markdown table: every figure of either run, this run's value beside the reference's ('--': absent)."""
    mine, ref = _rows(run), _rows(reference)
    lines = ["| figure | this run | reference |", "|---|---|---|"]
    lines += [f"| {name} | {mine.get(name, '--')} | {ref.get(name, '--')} |" for name in dict.fromkeys([*mine, *ref])]
    return lines
