"""`tokenrouter trace summarize RUN_DIR [RUN_DIR ...] [--json]`: per model busy fraction, idle gaps, mean batch
size and where requests waited, from the trace.json a run with `runtime.trace=true` wrote.

Why a command: the figures are the ones the paper's motivation names (bubbles while a request waits for a busy
model, batches that wait for their threshold); the bench records the same figures in summary.json `trace`.
Several run dirs print side by side (e.g. a TokenRouter run and a lock-step run of the same setting).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.trace.summary import format_summary, load_trace, summarize

HELP = "summarize a run's trace.json: busy fraction, idle gaps, batch sizes, waits per model"


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter trace", description=HELP)
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("summarize", help="print the figures of one or more runs' trace.json")
    s.add_argument("runs", nargs="+", type=Path, help="run dirs (or trace.json files)")
    s.add_argument("--json", action="store_true", help="print the figures as JSON (as summary.json records them)")
    return p


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    figures = {str(path): summarize(load_trace(path)) for path in args.runs}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    blocks = []
    for path, figs in figures.items():
        meta = load_trace(Path(path))["otherData"]["tokenrouter"]
        blocks.append(format_summary(figs, f"{path} ({meta['system']})"))
    print("\n\n".join(blocks))
    return 0
