"""The report's inline SVG: every label inside its drawing (none cut off at an edge, measured with a generous
estimate of each text's width), and a series' line joining its points in the order given (a swept parameter's),
never re-sorted by x."""

from __future__ import annotations

import re

from tokenrouter.evals.svg import Point, Series, chart, timeline

FONT_PX = {"tick": 11, "axis": 12, "title": 13, "lane": 12}
CHAR_EM = 0.62  # wider than the average glyph of a sans-serif face: an estimate that errs on the side of clipping


def outside(svg: str) -> list[str]:
    """The texts whose estimated box leaves the SVG's viewBox."""
    width, height = map(float, re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
    bad = []
    for attrs, text in re.findall(r"<text ([^>]*)>([^<]*)</text>", svg):
        size = FONT_PX[re.search(r'class="(\w+)"', attrs).group(1)]
        length = CHAR_EM * size * len(text)
        anchor = (re.search(r'text-anchor="(\w+)"', attrs) or [None, "start"])[1]
        start = {"start": 0.0, "middle": -length / 2, "end": -length}[anchor]
        rotated = re.search(r'translate\(([\d.]+) ([\d.]+)\) rotate\(-90\)', attrs)
        if rotated:  # along y: the text runs upwards from its anchor
            x, y = map(float, rotated.groups())
            box = (x - size, y - start - length, x + 0.3 * size, y - start)
        else:
            x = float(re.search(r'\bx="([\d.]+)"', attrs).group(1))
            y = float(re.search(r'\by="([\d.]+)"', attrs).group(1))
            box = (x + start, y - size, x + start + length, y + 0.3 * size)
        if box[0] < 0 or box[1] < 0 or box[2] > width or box[3] > height:
            bad.append(f"{text!r} at {tuple(round(v) for v in box)} in {width:g}x{height:g}")
    return bad


def test_chart_labels_stay_inside() -> None:
    series = [Series("a", [Point(0.5, 120.0), Point(2.0, 1100.0), Point(6.0, 12500.0)], "#000"),
              Series("b", [Point(0.0125, 0.001), Point(6.2, 14000.0)], "#111")]
    for width, height in ((520, 300), (560, 340)):
        svg = chart(series, "offered load (requests/s, Poisson)", "TTFT (ms): p50 solid, p99 dashed",
                    "TTFT (ms): p50 solid, p99 dashed", width=width, height=height, y_from_zero=True)
        assert outside(svg) == []


def test_timeline_labels_stay_inside() -> None:
    batch = {"ph": "X", "cat": "batch", "pid": 1, "tid": 1, "name": "decode", "ts": 1000.0, "dur": 5000.0,
             "args": {"model": "large", "batch_size": 3, "new_tokens": 3, "engine_ms": 4.9, "committed": 3,
                      "handoffs": 0, "threshold": 1, "ready": 3, "active_n": 4, "wait_ms_max": 0.1,
                      "forced_by_max_wait": False}}
    doc = {"otherData": {"tokenrouter": {"models": ["small", "large"], "system": "tokenrouter"}},
           "traceEvents": [batch]}
    for start, span in ((0.0, 400.0), (1200.0, 400.0)):  # the last tick reads e.g. "1.6k ms"
        assert outside(timeline(doc, start, span)) == []


def test_a_line_joins_points_in_the_order_given() -> None:
    # a Pareto series in threshold order: throughput falls, accuracy does not fall monotonically with it
    pts = [Point(300.0, 50.0), Point(200.0, 70.0), Point(250.0, 65.0)]
    svg = chart([Series("r2r", pts, "#000")], "throughput", "accuracy")
    line = re.search(r'<polyline points="([^"]+)"', svg).group(1).split()
    xs = [float(p.split(",")[0]) for p in line]
    circles = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)]
    assert xs == circles and xs[0] > xs[2] > xs[1]  # 300, 200, 250 as given, not 200, 250, 300
