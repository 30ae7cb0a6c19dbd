"""`tokenrouter report RUN_DIRS... [--out DIR]`: tables and figures from benchmark run directories."""

from __future__ import annotations

from pathlib import Path

from tokenrouter.cli.args import ArgumentParser

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
    parser.add_argument("--out", default="report", help="output directory (default: ./report)")
    args = parser.parse_args(argv)

    from evals.report import write_reports
    from evals.results import load_results

    df = load_results(args.run_dirs)
    written = write_reports(df, Path(args.out))
    print(f"{len(df)} runs from {len(args.run_dirs)} path(s); wrote {len(written)} files:")
    for path in written:
        print(f"  {path}")
    return 0
