"""End to end (slow): a two-point `tokenrouter bench -m` sweep on sim engines, then `tokenrouter report`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def tokenrouter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokenrouter", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_sweep_then_report(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    args = [
        "bench",
        "-m",
        "models=sim-r2r",
        "workload=synthetic",
        "workload.num_requests=4",
        "workload.output_tokens=16",
        "concurrency=1,2",
        f"hydra.sweep.dir={sweep}",
    ]
    first = tokenrouter(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    summaries = sorted(sweep.rglob("summary.json"))
    assert len(summaries) == 2
    stamps = [p.stat().st_mtime_ns for p in summaries]
    again = tokenrouter(*args)  # resumes: finished runs are skipped, not rerun
    assert again.returncode == 0, again.stderr[-2000:]
    assert [p.stat().st_mtime_ns for p in summaries] == stamps

    out = tmp_path / "report"
    report = tokenrouter("report", str(sweep), "--out", str(out))
    assert report.returncode == 0, report.stderr
    assert "2 runs" in report.stdout and (out / "concurrency.png").stat().st_size > 10_000
    conc = pd.read_csv(out / "concurrency.csv")
    assert list(conc["concurrency"]) == [1, 2] and (conc["throughput_tok_s"] > 0).all()
