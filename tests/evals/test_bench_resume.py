"""Resuming a sweep over what a killed run leaves on disk: a cut-short summary.json makes its point run again
(with a warning), never crash the sweep; the rerun starts that point's requests.jsonl afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tokenrouter.cli import main

SIM = ["models=sim-r2r", "system=lockstep", "workload.num_requests=6", "workload.output_tokens=12"]


def test_partial_summary_and_requests_are_rerun(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = ["bench", "-m", *SIM, "concurrency=1,2", f"hydra.sweep.dir={tmp_path}"]
    assert main(sweep) == 0
    broken, kept = tmp_path / "0", tmp_path / "1"
    whole = (broken / "summary.json").read_text()
    (broken / "summary.json").write_text(whole[: len(whole) // 2])  # what a non-atomic write left when killed
    with (broken / "requests.jsonl").open("a") as fh:
        fh.write('{"index": 3, "output_ids": [1, 2')  # and a request line cut off mid-write
    kept_mtime = (kept / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(sweep) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    # the warning goes to stderr (and the point's log), never to stdout, which carries the results table
    warning = f"{broken / 'summary.json'}: invalid JSON"
    assert warning in err and "rerunning this point" in err and warning not in out
    assert warning in (broken / "bench.log").read_text()
    assert json.loads((broken / "summary.json").read_text())["num_requests"] == 6
    rows = [json.loads(line) for line in (broken / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(6))  # afresh: no leftover line, none twice
    assert (kept / "summary.json").stat().st_mtime_ns == kept_mtime  # the complete point was skipped
    assert sorted(pd.read_csv(tmp_path / "results.csv")["concurrency"]) == [1, 2]


@pytest.mark.parametrize("content", ["", "[1, 2]", "\xff\xfe", "{}"])
def test_empty_or_foreign_summary_is_rerun(tmp_path: Path, content: str) -> None:
    sweep = ["bench", "-m", *SIM, f"hydra.sweep.dir={tmp_path}"]
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "summary.json").write_bytes(content.encode("latin-1"))
    assert main(sweep) == 0
    assert json.loads((tmp_path / "0" / "summary.json").read_text())["num_requests"] == 6
