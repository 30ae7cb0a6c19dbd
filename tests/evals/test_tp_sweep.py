"""`+experiment=tp_sweep_cpu` end to end (slow: four runs, two with a second rank process): results for
both TP settings, and a report with one frontier per TP setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tp_sweep_cpu_runs_and_reports_frontiers_per_tp(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun"
    bench = subprocess.run([sys.executable, "-m", "tokenrouter", "bench", "-m", "+experiment=tp_sweep_cpu",
                            "workload.num_problems=4", f"hydra.sweep.dir={sweep}"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert bench.returncode == 0, bench.stderr[-3000:]
    results = pd.read_csv(sweep / "results.csv")
    assert sorted(results["tp"].unique()) == ["1/1", "1/2"] and len(results) == 4
    report = subprocess.run([sys.executable, "-m", "tokenrouter", "report", str(sweep), "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    series = set(pd.read_csv(tmp_path / "r" / "pareto_arith.csv")["series"])
    assert series == {"tokenrouter (rstitch) · TP 1/1", "tokenrouter (rstitch) · TP 1/2"}
