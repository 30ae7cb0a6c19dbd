"""`tokenrouter report RUN_DIRS... [--out DIR]`: tables and figures from benchmark run directories."""

from __future__ import annotations

from pathlib import Path

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.errors import StorageError, UserError

HELP = "tables and plots (Table 3, Pareto, threshold validation, ablation, ...) from run dirs"


def run(argv: list[str]) -> int:
    parser = ArgumentParser(
        prog="tokenrouter report",
        description=(
            "Collect benchmark runs (directories searched recursively for summary.json) into one table "
            "(runs.csv) and write every report the runs support: Table 3 (Markdown/CSV/LaTeX, next to the "
            "paper's figures), Pareto plot, threshold-validation plot, ablation table, concurrency plot and "
            "query-level routing metrics (APGR, CPT(50%)). Figures are PNG + PDF."
        ),
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run or sweep directories")
    parser.add_argument("--out", default=None, help="output directory (default: ./report; with --format "
                                                     "lm-eval: each run's own directory)")
    parser.add_argument("--format", choices=("tables", "lm-eval"), default="tables",
                        help="tables: the reports above; lm-eval: each graded run as lm-evaluation-harness "
                             "results_<date>.json + samples_<task>_<date>.jsonl")
    parser.add_argument("--task", default=None, help="lm-eval task name (default: tokenrouter_<workload>)")
    args = parser.parse_args(argv)
    if args.format == "lm-eval":
        return export_lm_eval(args.run_dirs, args.task, args.out)

    from tokenrouter.evals.report import write_reports
    from tokenrouter.evals.store import load_results

    df = load_results(args.run_dirs)
    out = Path(args.out or "report")
    try:
        written = write_reports(df, out)
    except OSError as exc:  # read-only, no permission, disk full: one line naming the path
        raise StorageError(exc.filename or out, exc) from None
    print(f"{len(df)} runs from {len(args.run_dirs)} path(s); wrote {len(written)} files:")
    for path in written:
        print(f"  {path}")
    from tokenrouter.evals.headline import headlines

    found = headlines(df)  # report.html's cards, in words: each ratio with its interval and machine's state
    if found:
        print("TokenRouter against R2R:")
        for h in found:
            print(f"  {h.sentence()}")
    return 0


def export_lm_eval(paths: list[str], task: str | None, out: str | None) -> int:
    from tokenrouter.evals.lm_eval_export import export_run
    from tokenrouter.evals.store import find_run_dirs

    runs = find_run_dirs(paths)
    if not runs:
        raise UserError(f"no completed run (summary.json) under {' '.join(paths)}")
    for run_dir in runs:
        target = Path(out) / run_dir.name if out and len(runs) > 1 else Path(out) if out else None
        for path in export_run(run_dir, task, target):
            print(path)
    return 0
