"""`report.html`: one self-contained page per study (no network access: styles, script and charts inline).

It opens with the answer: one card per comparison of TokenRouter with an R2R baseline on the same configuration
(the throughput ratio and its 95% interval over repeats, the accuracy difference, the paper's figure where it
has one, and a warning where the machine was contended: `tokenrouter.evals.headline`). Then, each written when the runs
hold what it needs: the tables the other reports wrote (Table 3, query-level, systems, ablation; columns empty
in every row left out), the accuracy-throughput Pareto plots (hover a point for its run and configuration; a
series' line joins its points in the order of the swept value), open loop load curves, a batch timeline of one
TokenRouter run beside one lock-step run of the same setting (from their trace.json, on one time scale), a
sample of responses with each token coloured by the model that produced it (samples.json), and every run's
details. The PNG/PDF/LaTeX outputs stay for papers.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from tokenrouter.evals.headline import Headline, headlines, interval_text
from tokenrouter.evals.machine import note
from tokenrouter.evals.runs_table import THROUGHPUT, has, pair_label, series_label, system_label
from tokenrouter.evals.svg import KIND_COLORS, PALETTE, Point, Series, chart, esc, legend, timeline
from tokenrouter.evals.tables import present, without_empty_columns
from tokenrouter.trace.summary import TRACE_FILE, format_summary, load_trace, summarize

REPORT_FILE = "report.html"
TABLES = [("summary", "Summary"), ("table3", "Table 3"), ("query_level", "Query-level routing"), ("systems", "Systems on the sim pair"),
          ("ablation", "Ablation"), ("concurrency", "Concurrency"), ("load", "Load"), ("left_out", "Runs left out")]
TIMELINE_SPAN_MS = 400.0  # the timelines' window: a few dozen steps at the paper's step times
DETAIL_COLUMNS = ["system", "models", "algorithm", "workload", "concurrency", "arrival", "request_rate",
                  THROUGHPUT, "accuracy", "large_token_share", "mean_latency_s", "thresholds"]
SAMPLES_SHOWN = 4


def write_html_report(df: pd.DataFrame, out: Path) -> Path:
    """report.html under `out` (the tables the other reports wrote there are read back from their CSVs)."""
    sections = [
        ("answer", "TokenRouter against R2R", answer_section(df)),
        ("tables", "Tables", tables_section(out)),
        ("pareto", "Accuracy vs throughput", pareto_section(df)),
        ("load", "Load curves (open loop)", load_section(df)),
        ("timeline", "Batch timelines", timeline_section(df)),
        ("tokens", "Responses, token by token", tokens_section(df)),
        ("runs", "Runs", runs_section(df)),
    ]
    body = "".join(f'<section id="{sid}"><h2>{esc(title)}</h2>{content}</section>'
                   for sid, title, content in sections if content)
    nav = " · ".join(f'<a href="#{sid}">{esc(title)}</a>' for sid, title, content in sections if content)
    page = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>TokenRouter report</title>"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>{CSS}</style></head>"
            f"<body><header><h1>TokenRouter report</h1><p>{len(df)} runs · written "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}</p><nav>{nav}</nav></header>{body}"
            f"<div id=\"tip\" hidden></div><script>{SCRIPT}</script></body></html>")
    path = out / REPORT_FILE
    path.write_text(page, encoding="utf-8")
    return path


# ---- sections -------------------------------------------------------------------------------------------


def answer_section(df: pd.DataFrame) -> str:
    """One card per comparison of TokenRouter with an R2R baseline (tokenrouter.evals.headline)."""
    found = headlines(df)
    if not found:
        return ""
    intro = ('<p class="note">TokenRouter\'s decoding throughput over the baseline\'s on the same configuration '
             "(mean over repeats; the interval from the per-repeat ratios), the accuracy of both, and the paper's "
             "figure where it reports this setting (GPUs).</p>")
    return intro + '<div class="cards">' + "".join(card(h) for h in found) + "</div>"


def card(h: Headline) -> str:
    spread = interval_text(h.per_repeat) or "one repeat: no interval"
    lines = [f'<div class="ratio">{h.ratio:.2f}x</div>',
             f'<div class="what">TokenRouter / {esc(h.rival)} throughput: {h.subject_tok_s:.1f} vs '
             f"{h.rival_tok_s:.1f} tok/s</div>", f'<div class="spread">{esc(spread)}</div>']
    if h.accuracy is not None:
        diff = 100 * (h.accuracy[0] - h.accuracy[1])
        lines.append(f'<div class="acc">accuracy {h.accuracy[0]:.1%} vs {h.accuracy[1]:.1%} '
                     f"({diff:+.1f} points)</div>")
    if h.paper is not None:
        lines.append(f'<div class="paper">paper (Table 3, GPUs): {h.paper:.2f}x</div>')
    if h.contended:
        lines.append(f'<div class="warn">{esc(sentence_case(note(h.contended)))}.</div>')
    kind = "card contended" if h.contended else "card"
    return f'<div class="{kind}"><div class="title">{esc(h.title)}</div>{"".join(lines)}</div>'


def sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:]


def pareto_section(df: pd.DataFrame) -> str:
    from tokenrouter.evals.comparable import config_keys, key_name, split_series
    from tokenrouter.evals.demo_summary import setting
    from tokenrouter.evals.plots import series_across_setups, swept

    runs = has(df, "accuracy", THROUGHPUT, "system")
    if runs.empty:
        return ""
    # series as the PNG Pareto plot names them: runs that differ in anything but the swept knob are apart
    keys = [k for k in config_keys(runs) if not swept(key_name(k))]
    runs = runs.assign(series=split_series(runs, series_across_setups(runs), ["workload"], keys=keys),
                       setting=runs.apply(setting, axis=1))
    parts = []
    for (workload, models), group in runs.groupby(["workload", "models"], dropna=False):
        series = []
        for k, (name, pts) in enumerate(group.groupby("series")):
            # a point per setting (the mean over its repeats), joined in the order of the swept value
            points = [Point(g[THROUGHPUT].mean(), 100 * g["accuracy"].mean(), setting_tip(g))
                      for _, g in sorted(pts.groupby("setting"), key=lambda item: setting_order(item[0]))]
            series.append(Series(str(name), points, PALETTE[k % len(PALETTE)], line=len(points) > 1))
        parts.append(chart(series, "throughput (tok/s)", "accuracy (%)",
                           f"{workload}, pair {pair_label(models)}"))
    return '<p class="note">Hover a point for its run and configuration.</p>' + "".join(
        f'<div class="panel">{p}</div>' for p in parts)


def setting_order(setting: str) -> tuple:
    """Sort key of a point's setting (`threshold=0.5,tau=2`): by each value, numerically where it is a number."""
    key = []
    for part in str(setting).split(","):
        text = part.split("=", 1)[-1]
        try:
            key.append((0, float(text), ""))
        except ValueError:
            key.append((1, 0.0, text))
    return tuple(key)


def setting_tip(runs: pd.DataFrame) -> str:
    """A point's tip: its setting, the repeats averaged, then the first run's identity and figures."""
    first = runs.iloc[0]
    head = f"{first['setting']}" + (f" (mean of {len(runs)} repeats)" if len(runs) > 1 else "")
    return "\n".join([head, run_tip(first)]) if head else run_tip(first)


def run_tip(row: pd.Series) -> str:
    """A run's identity and figures, for a point's hover tip."""
    config = {k.removeprefix("cfg."): v for k, v in row.items()
              if k.startswith(("cfg.algorithm.", "cfg.runtime.thresholds", "cfg.concurrency")) and present(v)}
    figures = [f"{THROUGHPUT}: {row[THROUGHPUT]:.1f}"]
    for col in ("accuracy", "large_token_share", "mean_latency_s"):
        if present(row.get(col)):
            figures.append(f"{col}: {row[col]:.3g}")
    return "\n".join([f"run: {row.get('run_dir')}", *figures, *(f"{k}: {v}" for k, v in config.items())])


def tables_section(out: Path) -> str:
    blocks = []
    for stem, title in TABLES:
        csv, md = out / f"{stem}.csv", out / f"{stem}.md"
        if not csv.exists():
            continue
        caption = md.read_text(encoding="utf-8").split("\n", 1)[0] if md.exists() else title
        table = pd.read_csv(csv)
        blocks.append(f"<h3>{esc(title)}</h3><p class=\"note\">{esc(caption)}</p>{html_table(table)}")
    return "".join(blocks)


def load_section(df: pd.DataFrame) -> str:
    runs = has(df, "request_rate", THROUGHPUT, "system")
    if runs.empty:
        return ""
    runs = runs.assign(series=runs.apply(series_label, axis=1))
    runs = runs[runs.groupby("series")["request_rate"].transform("nunique") >= 2]
    if runs.empty:
        return ""
    names = sorted(runs["series"].unique())
    color = {n: PALETTE[k % len(PALETTE)] for k, n in enumerate(names)}
    panels = [("output_throughput" if "output_throughput" in runs else THROUGHPUT, None, "achieved throughput (tok/s)"),
              ("median_ttft_ms", "p99_ttft_ms", "TTFT (ms): p50 solid, p99 dashed"),
              ("median_tpot_ms", "p99_tpot_ms", "TPOT (ms): p50 solid, p99 dashed"),
              ("request_goodput", None, "goodput under the SLOs (req/s)")]
    charts = []
    for p50, p99, label in panels:
        if p50 not in runs or runs[p50].isna().all():
            continue
        series = []
        for name, g in runs.groupby("series"):
            g = g.groupby("request_rate", as_index=False).mean(numeric_only=True)
            series.append(Series(str(name), [Point(r["request_rate"], r[p50], f"rate {r['request_rate']:g}/s: "
                                                   f"{r[p50]:.3g}") for _, r in g.iterrows()], color[name]))
            if p99 and p99 in g:
                series.append(Series(f"{name} p99", [Point(r["request_rate"], r[p99], f"p99 {r[p99]:.3g}")
                                                     for _, r in g.iterrows()], color[name], dashed=True))
        charts.append(chart(series, "offered load (requests/s, Poisson)", label, label, width=520, height=300,
                            y_from_zero=True))
    return "".join(f'<div class="panel">{c}</div>' for c in charts if c)


def traced(df: pd.DataFrame) -> pd.DataFrame:
    """The runs whose dir holds a trace.json."""
    if "run_dir" not in df:
        return df.iloc[0:0]
    return df[df["run_dir"].map(lambda d: (Path(str(d)) / TRACE_FILE).is_file())]


def timeline_pair(df: pd.DataFrame) -> tuple[pd.Series | None, pd.Series | None]:
    """One traced TokenRouter run and a traced lock-step run of the same setting (models, workload, N,
    algorithm), if there is one."""
    runs = traced(df)
    key = [c for c in runs if c in ("models", "workload", "concurrency", "seed") or c.startswith("cfg.algorithm.")]
    tr = runs[runs["system"] == "tokenrouter"] if "system" in runs else runs.iloc[0:0]
    ls = runs[runs["system"] == "lockstep"] if "system" in runs else runs.iloc[0:0]
    for _, a in tr.iterrows():
        for _, b in ls.iterrows():
            if all(str(a[c]) == str(b[c]) for c in key):
                return a, b
    if not tr.empty:
        return tr.iloc[0], None
    return (ls.iloc[0], None) if not ls.empty else (None, None)


def timeline_section(df: pd.DataFrame) -> str:
    a, b = timeline_pair(df)
    if a is None:
        return ('<p class="note">No traced run: rerun with <code>runtime.trace=true</code> for batch timelines '
                "(and open a run's trace.json in Perfetto).</p>")
    docs = [(row, load_trace(Path(str(row["run_dir"])))) for row in (a, b) if row is not None]
    length = min(summarize(d)["window_s"] * 1e3 for _, d in docs)
    span = min(TIMELINE_SPAN_MS, length)
    start = max(0.0, min(0.25 * length, length - span))
    keys = legend([(k, c, False) for k, c in KIND_COLORS.items()] + [("hand-off", "#555", True)])
    blocks = [f'<p class="note">{start:.0f}-{start + span:.0f} ms of each run on one scale; a batch is darker the '
              f"more requests it holds; hover a batch for its figures. Every run's trace.json opens in Perfetto "
              f"(ui.perfetto.dev: open the file; it stays in the browser).</p>{keys}"]
    for row, doc in docs:
        title = f"{series_label(row)}, N={row.get('concurrency')}: {row.get('run_dir')}"
        blocks.append(f'<h3>{esc(title)}</h3><div class="scroll">{timeline(doc, start, span)}</div>'
                      f'<pre class="summary">{esc(format_summary(summarize(doc)))}</pre>')
    return "".join(blocks)


def tokens_section(df: pd.DataFrame) -> str:
    a, b = timeline_pair(df)
    rows = [r for r in (a, b) if r is not None] or [r for _, r in traced(df).iterrows()][:1]
    for row in rows:
        path = Path(str(row["run_dir"])) / "samples.json"
        if path.is_file():
            return samples_html(json.loads(path.read_text(encoding="utf-8")), f"{series_label(row)}: {row['run_dir']}")
    return ""


def samples_html(data: dict[str, Any], title: str) -> str:
    models = data["models"]
    keys = legend([(m, PALETTE[i % len(PALETTE)], False) for i, m in enumerate(models)])
    blocks = [f'<p class="note">{esc(title)}. Each token has the colour of the model that produced it; a bar marks '
              f"a hand-off (the next token came from another model).</p>{keys}"]
    for sample in data["samples"][:SAMPLES_SHOWN]:
        spans, before = [], None
        for k, (text, m) in enumerate(sample["tokens"]):
            cls = f"tok m{m}" + (" handoff" if before is not None and m != before else "")
            spans.append(f'<span class="{cls}" data-tip="token {k} · {esc(models[m])}">{esc(text)}</span>')
            before = m
        verdict = "" if sample.get("correct") is None else (" · correct" if sample["correct"] else " · wrong")
        more = " · first tokens only" if sample.get("truncated") else ""
        blocks.append(f'<div class="sample"><div class="meta">request {sample["index"]} · '
                      f'{sample.get("handoffs") or 0} hand-offs{verdict}{more}</div>'
                      f'<div class="prompt">{esc(sample.get("prompt", ""))}</div>'
                      f'<div class="tokens">{"".join(spans)}</div></div>')
    colours = "".join(f".m{i}{{background:{c}33;border-bottom:2px solid {c}}}" for i, c in enumerate(PALETTE))
    return f"<style>{colours}</style>" + "".join(blocks)


def runs_section(df: pd.DataFrame) -> str:
    if df.empty:
        return ""
    rows = []
    for _, row in df.iterrows():
        cells = "".join(f"<td>{esc(_cell(system_label(row) if c == 'system' else row.get(c)))}</td>"
                        for c in DETAIL_COLUMNS)
        config = {k.removeprefix("cfg."): _plain(v) for k, v in row.items() if k.startswith("cfg.") and present(v)}
        extra = ""
        path = Path(str(row.get("run_dir"))) / TRACE_FILE
        if path.is_file():
            extra = f"<pre class=\"summary\">{esc(format_summary(summarize(load_trace(path))))}</pre>"
        rows.append(f"<tr>{cells}</tr><tr class=\"details\"><td colspan=\"{len(DETAIL_COLUMNS)}\"><details>"
                    f"<summary>{esc(row.get('run_dir'))}</summary>{extra}<pre>{esc(json.dumps(config, indent=1))}"
                    f"</pre></details></td></tr>")
    head = "".join(f"<th>{esc(c)}</th>" for c in DETAIL_COLUMNS)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


# ---- helpers --------------------------------------------------------------------------------------------


def html_table(table: pd.DataFrame) -> str:
    """A table, leaving out the columns empty in every row."""
    table = without_empty_columns(table)
    head = "".join(f"<th>{esc(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(_cell(v))}</td>" for v in row) + "</tr>"
                   for row in table.itertuples(index=False))
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _cell(v: Any) -> str:
    if not present(v):
        return "--"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:16px 24px;background:#fff;border-bottom:1px solid #ddd}
h1{margin:0 0 4px;font-size:20px}h2{font-size:17px;margin:0 0 8px}h3{font-size:14px;margin:16px 0 6px}
header p{margin:0;color:#666}nav a{color:#1f5fa8;text-decoration:none;margin-right:4px}
section{background:#fff;margin:16px 24px;padding:16px 20px;border:1px solid #e3e3e3;border-radius:6px}
.note{color:#555;margin:4px 0 8px}.panel{display:inline-block;vertical-align:top;margin:0 16px 12px 0}
.chart .grid,.timeline .grid{stroke:#e6e6e6}.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}
.title{font-size:13px;font-weight:600;fill:#222}.lane{font-size:12px;fill:#333}.pt{cursor:pointer}
.pt:hover{stroke:#000;stroke-width:2}.batch:hover{stroke:#000;stroke-width:1}
.flow{stroke:#555;stroke-width:.8;stroke-dasharray:3 2;opacity:.7}
.legend{margin:2px 0 8px}.key{margin-right:14px;font-size:12px;white-space:nowrap}
.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;border-radius:2px}
.swatch.dashed{height:3px;vertical-align:3px}
table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #e1e1e1;padding:3px 6px;text-align:right}
th{background:#f3f3f3;position:sticky;top:0}td:first-child,th:first-child{text-align:left}
tr.details td{text-align:left;border-top:none}details pre{max-height:320px;overflow:auto}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{border:1px solid #d9d9d9;border-radius:6px;padding:10px 14px;
min-width:240px;max-width:360px;background:#fcfcfc}.card .title{font-size:12px;color:#444;font-weight:600}
.card .ratio{font-size:30px;font-weight:700;margin:2px 0}.card .what,.card .spread,.card .acc,.card .paper{
font-size:12px;color:#333}.card .spread{color:#666}.card.contended{border-color:#d08a00;background:#fff8e6}
.card.contended .ratio{color:#8a6a00}.card .warn{margin-top:6px;font-size:12px;color:#7a4a00}
.scroll{overflow-x:auto}pre.summary{font-size:12px;background:#f6f6f6;padding:6px 8px;overflow-x:auto}
.sample{margin:10px 0 14px}.sample .meta{color:#666;font-size:12px}.prompt{color:#777;font-style:italic;
white-space:pre-wrap;margin:2px 0}.tokens{white-space:pre-wrap;font-family:ui-monospace,Menlo,monospace;
font-size:13px;line-height:1.9}.tok{padding:1px 0}.tok.handoff{box-shadow:-2px 0 0 #000}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;font-size:12px;padding:6px 8px;
border-radius:4px;white-space:pre;z-index:10;max-width:560px}
"""

SCRIPT = """
(function(){
  var tip=document.getElementById('tip');
  document.addEventListener('mouseover',function(e){
    var t=e.target.closest?e.target.closest('[data-tip]'):null;
    if(!t){tip.hidden=true;return;}
    tip.textContent=t.getAttribute('data-tip');tip.hidden=false;
  });
  document.addEventListener('mousemove',function(e){
    if(tip.hidden)return;
    var x=e.clientX+14,y=e.clientY+14,r=tip.getBoundingClientRect();
    if(x+r.width>window.innerWidth)x=e.clientX-r.width-14;
    if(y+r.height>window.innerHeight)y=e.clientY-r.height-14;
    tip.style.left=x+'px';tip.style.top=y+'px';
  });
})();
"""
