"""Does an Optuna multi-objective search find the grid's accuracy/throughput frontier in fewer runs?

Runs, on the local pair (`+experiment=demo`: models=tiny, arith, N = 8), a grid over the R2R router threshold
and an Optuna search (`hydra/sweeper=optuna_pareto`: the interval's two ends, then TPE; objectives accuracy and
throughput) over the same interval, both on the same held-out problems, then checks every point of the grid's
frontier: matched when some Optuna point has accuracy at least the grid point's 95% CI lower bound (Wilson) and
throughput at least (1 - tolerance) x its throughput (single runs carry no throughput interval; the tolerance
stands for the 5-25% run-to-run spread measured on this machine; the thresholds both searches ran, the ends,
show this run's spread). Prints both frontiers and the verdict; `tokenrouter report OUT` draws them side by side.

    .venv/bin/python benchmarks/bench_optuna_vs_grid.py --router PATH [--grid 0.1,0.2,...] [--trials 8]
        [--out runs/optuna_vs_grid] [--tolerance 0.1] [--optuna OVERRIDE...]
    (a sweep whose results.csv exists is reused, so a second search can be compared with the same grid)

PATH: the pair's R2R router (`tokenrouter demo` prints it; or `tokenrouter train-router --algorithm r2r`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

from tokenrouter.cli import main as tokenrouter
from tokenrouter.evals.plots import pareto_frontier
from tokenrouter.evals.store import load_results

THROUGHPUT = "throughput_tok_s"


def sweep(out: Path, router: str, extra: list[str]) -> None:
    if (out / "results.csv").is_file():
        return
    code = tokenrouter(["bench", "-m", "+experiment=demo", f"++models.routers.r2r={router}",
                        f"hydra.sweep.dir={out}", *extra])
    if code:
        sys.exit(f"sweep into {out} failed (exit {code})")


def points(root: Path) -> pd.DataFrame:
    df = load_results([root])
    cols = ["cfg.algorithm.threshold", "accuracy", "accuracy_ci95_low", THROUGHPUT]
    return df[cols].rename(columns={"cfg.algorithm.threshold": "threshold"}).sort_values("threshold")


def matches(grid: pd.DataFrame, found: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """The grid's frontier points, each with the Optuna point that matches it (or none)."""
    front = pareto_frontier(grid, THROUGHPUT, "accuracy").copy()
    best = []
    for _, g in front.iterrows():
        ok = found[(found["accuracy"] >= g["accuracy_ci95_low"]) & (found[THROUGHPUT] >= (1 - tolerance) * g[THROUGHPUT])]
        best.append(None if ok.empty else float(ok.sort_values(THROUGHPUT).iloc[-1]["threshold"]))
    front["matched by optuna threshold"] = best
    return front


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--router", required=True)
    p.add_argument("--grid", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("runs/optuna_vs_grid"))
    p.add_argument("--tolerance", type=float, default=0.1)
    p.add_argument("--optuna", nargs="*", default=[], metavar="OVERRIDE",
                   help="more overrides for the search, e.g. hydra/sweeper/sampler=nsgaii")
    args = p.parse_args()
    lo, hi = min(map(float, args.grid.split(","))), max(map(float, args.grid.split(",")))
    sweep(args.out / "grid", args.router, [f"algorithm.threshold={args.grid}"])
    sweep(args.out / "optuna", args.router, ["hydra/sweeper=optuna_pareto", "objective=[accuracy,throughput_tok_s]",
                                             f"algorithm.threshold=interval({lo},{hi})",
                                             f"hydra.sweeper.n_trials={args.trials}", *args.optuna])
    grid, found = points(args.out / "grid"), points(args.out / "optuna")
    pd.set_option("display.width", 160)
    print(f"grid ({len(grid)} runs):\n{grid.to_string(index=False)}\n")
    print(f"optuna ({len(found)} runs):\n{found.to_string(index=False)}\n")
    both = grid.merge(found, on="threshold", suffixes=(" grid", " optuna"))
    for _, row in both.iterrows():
        print(f"threshold {row['threshold']:g} run by both: throughput {row[THROUGHPUT + ' grid']:.1f} vs "
              f"{row[THROUGHPUT + ' optuna']:.1f} tok/s ({row[THROUGHPUT + ' optuna'] / row[THROUGHPUT + ' grid']:.2f}x), "
              f"accuracy {row['accuracy grid']:.3f} vs {row['accuracy optuna']:.3f}")
    table = matches(grid, found, args.tolerance)
    print(f"grid frontier, matched when an optuna point has accuracy >= its CI low and throughput >= "
          f"{1 - args.tolerance:.0%} of it:\n{table.to_string(index=False)}")
    hit = table["matched by optuna threshold"].notna().sum()
    load = os.getloadavg()[0]
    print(f"\n{hit} of {len(table)} grid frontier points matched by {len(found)} optuna runs against "
          f"{len(grid)} grid runs (load average {load:.1f})")


if __name__ == "__main__":
    main()
