"""Inline SVG for the HTML report: line/scatter charts with hover tips, and batch timelines from a trace.

Why hand-written SVG: the report is one self-contained file that opens offline, so no plotting library's
JavaScript is fetched or inlined (Plotly alone is 3.5 MB); every mark carries a `data-tip` the report's few
lines of script show on hover.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]
KIND_COLORS = {"decode": "#4c78a8", "extend": "#f58518", "mixed": "#b279a2"}
MARGIN = {"left": 64, "right": 28, "top": 28, "bottom": 44}  # right: room for half the last x tick label


@dataclass
class Point:
    x: float
    y: float
    tip: str = ""


@dataclass
class Series:
    name: str
    points: list[Point]
    color: str
    dashed: bool = False
    line: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def fmt(v: float) -> str:
    """A tick or value label: 3 significant digits, thousands as k."""
    if v == 0:
        return "0"
    if abs(v) >= 10_000:
        return f"{v / 1000:.3g}k"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if raw <= m * step)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def chart(series: list[Series], x_label: str, y_label: str, title: str = "", width: int = 560,
          height: int = 340, y_from_zero: bool = False) -> str:
    """A line/scatter chart; each point's tip shows on hover."""
    pts = [p for s in series for p in s.points if math.isfinite(p.x) and math.isfinite(p.y)]
    if not pts:
        return ""
    xs, ys = [p.x for p in pts], [p.y for p in pts]
    xt = nice_ticks(min(xs), max(xs))
    yt = nice_ticks(0.0 if y_from_zero else min(ys), max(ys))
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]
    left, top = MARGIN["left"], MARGIN["top"]
    w, h = width - left - MARGIN["right"], height - top - MARGIN["bottom"]

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0 or 1) * w

    def py(y: float) -> float:
        return top + h - (y - y0) / (y1 - y0 or 1) * h

    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="{esc(title or y_label)}">']
    if title:
        out.append(f'<text x="{left}" y="16" class="title">{esc(title)}</text>')
    for t in xt:
        out.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top}" y2="{top + h}" class="grid"/>'
                   f'<text x="{px(t):.1f}" y="{top + h + 16}" class="tick" text-anchor="middle">{fmt(t)}</text>')
    for t in yt:
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{py(t):.1f}" y2="{py(t):.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{py(t) + 4:.1f}" class="tick" text-anchor="end">{fmt(t)}</text>')
    out.append(f'<text x="{left + w / 2}" y="{height - 8}" class="axis" text-anchor="middle">{esc(x_label)}</text>')
    out.append(f'<text transform="translate(14 {top + h / 2}) rotate(-90)" class="axis" '
               f'text-anchor="middle">{esc(y_label)}</text>')
    for s in series:
        # joined in the order given (a swept parameter's, e.g. a threshold's), never re-sorted by x: a line
        # through a Pareto series sorted by throughput zig-zags wherever accuracy does not fall with speed
        own = [p for p in s.points if math.isfinite(p.x) and math.isfinite(p.y)]
        if s.line and len(own) > 1:
            path = " ".join(f"{px(p.x):.1f},{py(p.y):.1f}" for p in own)
            dash = ' stroke-dasharray="5 4"' if s.dashed else ""
            out.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="1.6"{dash}/>')
        for p in own:
            tip = esc(f"{s.name}\n{p.tip}" if p.tip else s.name)
            out.append(f'<circle cx="{px(p.x):.1f}" cy="{py(p.y):.1f}" r="4.5" fill="{s.color}" class="pt" '
                       f'data-tip="{tip}"/>')
    out.append("</svg>")
    return "".join(out) + legend([(s.name, s.color, s.dashed) for s in series])


def legend(items: list[tuple[str, str, bool]]) -> str:
    cells = "".join(f'<span class="key"><span class="swatch{" dashed" if dashed else ""}" '
                    f'style="background:{color}"></span>{esc(name)}</span>' for name, color, dashed in items)
    return f'<div class="legend">{cells}</div>'


def timeline(doc: dict[str, Any], start_ms: float, span_ms: float, width: int = 1100, lane: int = 34) -> str:
    """The batches of a trace between start_ms and start_ms + span_ms, a lane per model, coloured by kind,
    hand-offs as lines from the sending batch to the one that ran the request next."""
    meta = doc["otherData"]["tokenrouter"]
    models = list(meta["models"])
    left, top = 90, 8
    w = width - left - 32  # the last tick's label ("1.6k ms") is centred on the right edge of the lanes
    height = top + lane * len(models) + 30
    lo, hi = start_ms * 1e3, (start_ms + span_ms) * 1e3

    def px(ts: float) -> float:
        return left + (min(max(ts, lo), hi) - lo) / (hi - lo) * w

    out = [f'<svg class="timeline" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="batch timeline, {esc(meta["system"])}">']
    lanes = {m: top + i * lane for i, m in enumerate(models)}
    for m, y in lanes.items():
        out.append(f'<text x="{left - 8}" y="{y + lane / 2 + 4}" class="lane" text-anchor="end">{esc(m)}</text>'
                   f'<line x1="{left}" x2="{left + w}" y1="{y + lane - 2}" y2="{y + lane - 2}" class="grid"/>')
    where: dict[tuple[int, int], str] = {}
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") == "batch":
            where[(ev["pid"], ev["tid"])] = ev["args"]["model"]
            end = ev["ts"] + ev["dur"]
            if end < lo or ev["ts"] > hi:
                continue
            a, y = ev["args"], lanes[ev["args"]["model"]]
            x0, x1 = px(ev["ts"]), px(end)
            tip = (f"{ev['name']} batch on {a['model']}: {a['batch_size']} requests, {a['new_tokens']} new tokens\n"
                   f"{(ev['dur'] / 1e3):.2f} ms (engine {a['engine_ms']:.2f} ms), committed {a['committed']}, "
                   f"hand-offs {a['handoffs']}\nthreshold {a['threshold']}, ready {a['ready']}, N {a['active_n']}"
                   f", waited up to {a['wait_ms_max']:.2f} ms" + (" (max-wait)" if a["forced_by_max_wait"] else ""))
            out.append(f'<rect x="{x0:.2f}" y="{y + 3}" width="{max(x1 - x0, 0.6):.2f}" height="{lane - 8}" '
                       f'fill="{KIND_COLORS.get(ev["name"], "#999")}" fill-opacity="{_opacity(a["batch_size"])}" '
                       f'class="batch" data-tip="{esc(tip)}"/>')
    starts: dict[Any, dict[str, Any]] = {}
    for ev in doc["traceEvents"]:
        if ev.get("cat") != "handoff":
            continue
        if ev["ph"] == "s":
            starts[ev["id"]] = ev
        elif ev["ph"] == "f" and ev["id"] in starts:
            s = starts.pop(ev["id"])
            if s["ts"] > hi or ev["ts"] < lo:
                continue
            ya = lanes[where.get((s["pid"], s["tid"]), models[0])] + lane / 2
            yb = lanes[where.get((ev["pid"], ev["tid"]), models[-1])] + lane / 2
            out.append(f'<line x1="{px(s["ts"]):.2f}" y1="{ya}" x2="{px(ev["ts"]):.2f}" y2="{yb}" class="flow"/>')
    for t in nice_ticks(start_ms, start_ms + span_ms, 8):
        if start_ms <= t <= start_ms + span_ms:
            x = px(t * 1e3)
            out.append(f'<text x="{x:.1f}" y="{height - 8}" class="tick" text-anchor="middle">{fmt(t)} ms</text>')
    out.append("</svg>")
    return "".join(out)


def _opacity(batch_size: int) -> str:
    """Fuller batches darker: 1 request 0.45, 8 or more 1.0."""
    return f"{min(1.0, 0.45 + 0.55 * (batch_size - 1) / 7):.2f}"
