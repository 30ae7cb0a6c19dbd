"""`tokenrouter bench` end to end on the sim pair with the in-process lock-step system (fast: no subprocesses):
run dir contents, sweeps that resume, clear errors."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tokenrouter import event_loop
from tokenrouter.cli import main
from tokenrouter.evals.bench import poisson_arrivals

ROOT = Path(__file__).resolve().parents[2]
SIM = ["models=sim-r2r", "system=lockstep", "workload.num_requests=6", "workload.output_tokens=12"]


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]


def test_run_writes_config_requests_and_summary(tmp_path: Path) -> None:
    assert main(["bench", *SIM, "concurrency=3", f"hydra.run.dir={tmp_path}"]) == 0
    assert (tmp_path / "config.yaml").is_file() and (tmp_path / ".hydra" / "config.yaml").is_file()
    rows = read_rows(tmp_path)
    assert sorted(r["index"] for r in rows) == list(range(6))
    for r in rows:
        assert len(r["output_ids"]) == 12 and r["finish_reason"] == "length"
        assert sum(r["tokens_per_model"].values()) == 12 and r["correct"] is None
        assert r["first_token_s"] >= r["arrival_s"] and r["finish_s"] >= r["first_token_s"]
        # the routing trace: which model committed each token, and when each commit reached the client
        assert sum(n for _, n in r["model_runs"]) == 12 and {m for m, _ in r["model_runs"]} <= {"small", "large"}
        assert {m: sum(n for mm, n in r["model_runs"] if mm == m) for m in r["tokens_per_model"]} \
            == r["tokens_per_model"]
        times = [t for t, _ in r["commit_ms"]]
        assert times == sorted(times) and times[0] == pytest.approx(r["ttft_s"] * 1e3, abs=0.01)
        assert r["prompt_text"] and r["gold"] is None and r["extracted"] is None
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_requests"] == 6 and summary["output_tokens"] == 72
    assert summary["system"] == "lockstep" and summary["concurrency"] == 3
    assert summary["throughput_tok_s"] == pytest.approx(72 / summary["elapsed_s"])
    assert 0 < summary["steady_throughput_tok_s"] < 3 * 1000 / 6.0  # 6 requests, 3 clients: two waves
    # lock-step rounds cost a small step plus, mostly, a large step: well below the small model's own rate
    assert 0 < summary["throughput_tok_s"] < 3 * 1000 / 6.0
    assert summary["predicted_throughput_tok_s"] > 0
    assert summary["stats"]["models"]["small"]["mean_batch_size"] > 1
    # bench_serving's figures, under its names
    assert (summary["completed"], summary["failed"], summary["total_output_tokens"]) == (6, 0, 72)
    assert summary["output_throughput"] == pytest.approx(72 / summary["duration"])
    assert summary["request_throughput"] == pytest.approx(6 / summary["duration"])
    assert 0 < summary["median_itl_ms"] <= summary["p99_itl_ms"] and summary["mean_tpot_ms"] > 0
    assert summary["mean_e2el_ms"] == pytest.approx(summary["mean_latency_s"] * 1e3)
    assert "request_goodput" not in summary and summary["warmup_requests"] == 0
    prov = summary["provenance"]  # enough to trace and rerun the figure
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert prov["git_commit"] == (head.stdout.strip() or None) and isinstance(prov["git_dirty"], bool | None)
    assert prov["packages"]["torch"] and prov["packages"]["tokenrouter"] and prov["devices"].keys() == {"cpu"}
    assert prov["command"] and all(isinstance(a, str) for a in prov["command"])  # this process's argv
    assert prov["date"].startswith("20") and prov["host"]
    assert prov["event_loop"] == event_loop.loop_name() and prov["event_loop"] in ("uvloop", "asyncio")


def test_warm_up_and_goodput_slo(tmp_path: Path) -> None:
    args = [*SIM, "warmup_requests=4", "slo.ttft_ms=1e9", "slo.e2el_ms=1e9", f"hydra.run.dir={tmp_path}"]
    assert main(["bench", *args]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(read_rows(tmp_path)) == 6 and summary["completed"] == 6  # warm-up requests are not recorded
    models = summary["stats"]["models"]
    assert sum(m["tokens_committed"] for m in models.values()) == (6 + 4) * 12  # ... but they did run
    assert summary["warmup_requests"] == 4 and summary["goodput_slos_ms"] == {"ttft": 1e9, "e2el": 1e9}
    assert summary["request_goodput"] == pytest.approx(summary["request_throughput"])
    assert summary["slo_attainment"] == 1.0
    assert main(["bench", *SIM, "slo.tpot_ms=1e-9", f"hydra.run.dir={tmp_path / 'tight'}"]) == 0
    assert json.loads((tmp_path / "tight" / "summary.json").read_text())["request_goodput"] == 0
    for bad in ("slo.tpot_ms=-1", "+slo.itl_ms=5", "warmup_requests=-1"):
        assert main(["bench", *SIM, bad, f"hydra.run.dir={tmp_path / 'bad'}"]) == 2, bad


def test_sweep_resumes_without_rerunning(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = ["bench", "-m", *SIM, "concurrency=1,2", f"hydra.sweep.dir={tmp_path}"]
    assert main(sweep) == 0
    summaries = sorted(tmp_path.glob("*/summary.json"))
    assert len(summaries) == 2
    assert {json.loads(p.read_text())["concurrency"] for p in summaries} == {1, 2}
    table = pd.read_csv(tmp_path / "results.csv")  # the sweep collected into one table
    assert sorted(table["concurrency"]) == [1, 2] and set(table["system"]) == {"lockstep"}
    first = {p: p.stat().st_mtime_ns for p in summaries}
    # a crashed point: its summary is gone, its partial requests.jsonl remains -> only it runs again
    crashed = summaries[0]
    crashed.unlink()
    requests_before = {p.parent: p.parent.joinpath("requests.jsonl").stat().st_mtime_ns for p in summaries}
    assert main(sweep) == 0
    assert crashed.is_file()
    other = summaries[1]
    assert other.stat().st_mtime_ns == first[other]
    assert other.parent.joinpath("requests.jsonl").stat().st_mtime_ns == requests_before[other.parent]
    assert "skipping" in capsys.readouterr().err + "".join(p.read_text() for p in tmp_path.glob("*/bench.log"))


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for argv in (["models=nope"], ["concurrency=0", *SIM[:2]], ["nosuchkey=1"], ["--bogus"], ["arrival=sometimes", *SIM[:2]],
                 ["system=single", "models=sim-r2r"], ["system=nope"]):
        capsys.readouterr()
        assert main(["bench", *argv, f"hydra.run.dir={tmp_path}"]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("tokenrouter bench: error:") and "\n" not in err and "Traceback" not in err, err
    assert not (tmp_path / "summary.json").exists()


def test_workload_path_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n')
    for argv, expected in ((["workload.path=" + str(data)], "workload.path is not used by workload synthetic"),
                           (["workload=math500", f"workload.path={tmp_path}"], "is a directory, expected a file"),
                           (["seed=abc"], "seed must be an integer, got 'abc'")):
        capsys.readouterr()
        assert main(["bench", *SIM[:2], *argv, f"hydra.run.dir={tmp_path / 'run'}"]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("tokenrouter bench: error:") and expected in err and "\n" not in err, err


def test_help_shows_ours_and_hydras(capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert "closed-loop" in out and "summary.json" in out  # ours
    assert "== Configuration groups ==" in out and "experiment:" in out and "threshold_validation" in out


def test_conf_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("TOKENROUTER_CONF", str(tmp_path))
    assert main(["bench"]) == 2
    assert "TOKENROUTER_CONF" in capsys.readouterr().err


def test_poisson_arrivals_are_open_loop_and_seeded(tmp_path: Path) -> None:
    assert main(["bench", *SIM, "arrival=poisson", "request_rate=40",
                 f"hydra.run.dir={tmp_path}"]) == 0
    rows = sorted(read_rows(tmp_path), key=lambda r: r["index"])
    gaps = [b["arrival_s"] - a["arrival_s"] for a, b in zip(rows, rows[1:], strict=False)]
    expected = poisson_arrivals(len(rows), 40.0, seed=0)
    want = [b - a for a, b in zip(expected, expected[1:], strict=False)]
    assert gaps == pytest.approx(want, abs=0.01)  # sent on the seeded schedule, not when others finish
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["arrival"] == "poisson" and summary["request_rate"] == 40.0 and summary["thresholds"] is None
    assert summary["steady_throughput_tok_s"] is None and summary["predicted_throughput_tok_s"] is None
    assert 0 < summary["mean_in_flight"] <= summary["num_requests"]
    assert main(["bench", *SIM, "arrival=poisson", f"hydra.run.dir={tmp_path / 'bad'}"]) == 2  # no rate


def test_all_at_once_and_grading_free_workload(tmp_path: Path) -> None:
    assert main(["bench", *SIM, "arrival=all_at_once", f"hydra.run.dir={tmp_path}"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["concurrency"] == 6 and summary["arrival"] == "all_at_once"
    assert summary["stats"]["models"]["small"]["mean_batch_size"] > 3


def test_the_sweep_table_names_a_single_models_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A single-model row says which model ran (its role in the set and its source), not a bare `single`."""
    assert main(["bench", "-m", "models=sim-r2r", "system=single", "+system.model=small,large",
                 "workload.num_requests=2", "workload.output_tokens=4", f"hydra.sweep.dir={tmp_path}"]) == 0
    table = capsys.readouterr().out.split("\nstatus ", 1)[1]  # the table, after Hydra's job lines
    assert "single (small: sim)" in table and "single (large: sim)" in table
    assert not re.search(r"\bsingle\b(?! \()", table)  # never a bare `single`
