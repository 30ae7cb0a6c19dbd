"""TokenRouter vs lock-step R2R on the sim pair (bernoulli p = 0.35, 6.0 / 27.9 ms) at N = 4 and 8: runs the
`systems_sim` experiment as one sweep and prints measured and predicted throughputs and their ratios.

    .venv/bin/python benchmarks/bench_systems.py [--out DIR] [EXTRA HYDRA OVERRIDES...]

Measured: total output tokens / elapsed, and steady (summary.json `steady_throughput_tok_s`: while all N
clients were busy, i.e. without the drain tail at the end, which the closed-loop predictions do not have).
Predictions: lock-step from `tokenrouter.perfmodel.lockstep.lockstep_throughput` (every round commits N tokens and costs
a small step plus a large step unless no row was routed), TokenRouter from the throughput model's Markov
chain at the thresholds the runtime used. A rerun with the same --out reuses finished runs (delete the dir to
measure again). Timings need an otherwise idle machine: sim engines sleep, so CPU contention adds latency.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenrouter.cli import main as tokenrouter
from tokenrouter.evals.report import systems_comparison
from tokenrouter.evals.runs_table import STEADY
from tokenrouter.evals.store import load_results
from tokenrouter.evals.tables import to_markdown


def run(out: Path, extra: list[str]) -> dict[tuple[str, int], dict]:
    rc = tokenrouter(["bench", "-m", "+experiment=systems_sim", f"hydra.sweep.dir={out}", *extra])
    if rc != 0:
        sys.exit(rc)
    runs = {}
    for path in sorted(out.glob("*/N*/summary.json")):
        s = json.loads(path.read_text())
        runs[(s["system"], s["concurrency"])] = s
    return runs


def report(runs: dict[tuple[str, int], dict], out: Path) -> None:
    print("measured: total output tokens / elapsed; steady: the same while all N clients were busy (first to last "
          "arrival), i.e. without the drain tail a closed-loop model does not have")
    print(f"{'N':>3} {'system':<12} {'thresholds':<10} {'measured':>9} {'steady':>9} {'predicted':>9} "
          f"{'meas/pred':>9} {'steady/pred':>11}")
    for (system, n), s in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        pred = s.get("predicted_throughput_tok_s")
        steady = s.get(STEADY) or float("nan")
        ratios = f"{s['throughput_tok_s'] / pred:9.3f} {steady / pred:11.3f}" if pred else f"{'-':>9} {'-':>11}"
        print(f"{n:>3} {system:<12} {str(s.get('thresholds') or '-'):<10} {s['throughput_tok_s']:9.1f} "
              f"{steady:9.1f} {pred or float('nan'):9.1f} {ratios}")
    print()
    print(to_markdown(systems_comparison(load_results([out]))))  # what `tokenrouter report` writes as systems.md


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("multirun/systems_sim"))
    args, extra = parser.parse_known_args()
    report(run(args.out, extra), args.out)


if __name__ == "__main__":
    cli()
