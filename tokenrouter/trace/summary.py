"""The figures the paper's motivation names, measured per run from its trace document.

Per model: how much of the run's window it spent stepping (busy fraction), the idle gaps between its
consecutive batches (count, p50, p99: bubbles), its mean batch size, how many batches the max-wait bound forced,
and the time requests spent ready on it before their batch launched, split into waiting while the model was
busy with another batch and waiting while it was idle (for a delayed-batching threshold; in lock-step, for the
other model's step). The window is the run's first event to its last, the same for every model.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from tokenrouter.errors import UserError
from tokenrouter.trace.chrome import BATCH_CAT, FLOW_CAT, FORMAT, REQUEST_CAT

TRACE_FILE = "trace.json"


def load_trace(path: Path) -> dict[str, Any]:
    """A trace.json written by `runtime.trace` (a run dir: its trace.json); one-line errors otherwise."""
    if path.is_dir():
        path = path / TRACE_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file (run with runtime.trace=true to write it)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a readable trace: {exc}") from None
    meta = doc.get("otherData", {}).get("tokenrouter") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(doc.get("traceEvents"), list):
        raise UserError(f"{path}: not a TokenRouter trace (no otherData.tokenrouter.format {FORMAT!r})")
    return doc


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """Per model figures (see the module docstring) and the run's window, requests and hand-offs."""
    events = doc["traceEvents"]
    meta = doc["otherData"]["tokenrouter"]
    batches: dict[str, list[dict[str, Any]]] = defaultdict(list)
    first, last = float("inf"), float("-inf")
    flows = handoffs = 0
    for ev in events:
        ph, cat = ev.get("ph"), ev.get("cat")
        if ph == "X" and cat == BATCH_CAT:
            batches[ev["args"]["model"]].append(ev)
            first, last = min(first, ev["ts"]), max(last, ev["ts"] + ev["dur"])
        elif cat == REQUEST_CAT and ph in ("b", "e"):
            first, last = min(first, ev["ts"]), max(last, ev["ts"])
            handoffs += ev.get("args", {}).get("handoffs", 0) if ph == "b" else 0
        elif cat == FLOW_CAT and ph == "s":
            flows += 1
    window_us = max(last - first, 0.0) if last > first else 0.0
    models = {}
    for name in meta["models"]:
        own = sorted(batches.get(name, []), key=lambda e: e["ts"])
        models[name] = _model_figures(own, window_us)
    return {"window_s": window_us / 1e6, "requests": meta.get("requests", 0), "handoffs": handoffs, "flows": flows,
            "batches": sum(len(b) for b in batches.values()), "capped": meta.get("capped", []), "models": models}


def _model_figures(own: list[dict[str, Any]], window_us: float) -> dict[str, Any]:
    if not own:
        return {"batches": 0}
    busy = sum(e["dur"] for e in own)
    gaps = [max(0.0, b["ts"] - (a["ts"] + a["dur"])) for a, b in zip(own, own[1:], strict=False)]
    rows = sum(e["args"]["batch_size"] for e in own)
    wait = sum(e["args"]["wait_ms_sum"] for e in own) / 1e3
    busy_wait = min(sum(e["args"]["busy_wait_ms_sum"] for e in own) / 1e3, wait)
    return {
        "batches": len(own),
        "busy_fraction": busy / window_us if window_us else None,
        "busy_s": busy / 1e6,
        "idle_gaps": len(gaps),
        "idle_gap_p50_ms": _quantile(gaps, 0.5) / 1e3 if gaps else None,
        "idle_gap_p99_ms": _quantile(gaps, 0.99) / 1e3 if gaps else None,
        "idle_s": sum(gaps) / 1e6,
        "mean_batch_size": rows / len(own),
        "forced_by_max_wait": sum(1 for e in own if e["args"].get("forced_by_max_wait")),
        "wait_busy_s": busy_wait,
        "wait_idle_s": wait - busy_wait,
        "wait_per_request_step_ms": 1e3 * wait / rows if rows else None,
    }


def _quantile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] if q < 1 else max(values)


def format_summary(figures: dict[str, Any], title: str = "") -> str:
    """The figures as a short table, one row per model."""
    lines = [title] if title else []
    lines.append(f"window {figures['window_s']:.3f} s, {figures['requests']} requests, {figures['batches']} batches, "
                 f"{figures['handoffs']} hand-offs ({figures['flows']} drawn)" + (f"; cap reached: {', '.join(figures['capped'])}"
                                                       if figures["capped"] else ""))
    header = ("model", "batches", "busy", "idle gaps", "gap p50 ms", "gap p99 ms", "mean batch", "forced",
              "wait busy s", "wait idle s")
    rows = [header]
    for name, f in figures["models"].items():
        if not f.get("batches"):
            rows.append((name, "0", *["-"] * (len(header) - 2)))
            continue
        rows.append((name, str(f["batches"]), _pct(f["busy_fraction"]), str(f["idle_gaps"]),
                     _num(f["idle_gap_p50_ms"]), _num(f["idle_gap_p99_ms"]), f"{f['mean_batch_size']:.2f}",
                     str(f["forced_by_max_wait"]), f"{f['wait_busy_s']:.3f}", f"{f['wait_idle_s']:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
              for r in rows]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
