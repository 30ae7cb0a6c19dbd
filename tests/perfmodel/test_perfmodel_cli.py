"""`tokenrouter model ...`: JSON shapes, plots, latency profiles and one-line errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tokenrouter.cli import main

SYSTEM = ["--preset", "r2r", "--route-prob", "0.35", "--latency-ms", "6.0,27.9", "--quantum-ms", "0.1"]


def run_json(capsys, argv: list[str]) -> dict:
    assert main(["model", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_throughput_json_shape(capsys) -> None:
    out = run_json(capsys, ["throughput", *SYSTEM, "--concurrency", "4", "--thresholds", "1,3"])
    assert set(out) == {"throughput_tok_s", "num_states", "feasible"}
    assert out["feasible"] is True and out["num_states"] > 0 and out["throughput_tok_s"] > 0
    general = ["--route-matrix", "0.65,0.35;1,0", "--commit-matrix", "1,0;1,0", "--latency-ms", "6.0,27.9"]
    same = run_json(
        capsys, ["throughput", *general, "--quantum-ms", "0.1", "--concurrency", "4", "--thresholds", "1,3"]
    )
    assert same == out


def test_optimize_json_shapes_and_plot(capsys, tmp_path) -> None:
    out = run_json(capsys, ["optimize", *SYSTEM, "--concurrency", "4"])
    assert out["best"] == {
        "thresholds": [1, 3],
        "throughput_tok_s": pytest.approx(out["best"]["throughput_tok_s"]),
    }
    assert out["exhaustive"] is True and len(out["evaluated"]) == 10
    assert all(set(e) == {"thresholds", "throughput_tok_s"} for e in out["evaluated"])
    png = tmp_path / "curve.png"
    table = run_json(capsys, ["optimize", *SYSTEM, "--max-concurrency", "3", "--plot", str(png)])
    assert [row["concurrency"] for row in table["table"]] == [1, 2, 3]
    assert [row["thresholds"] for row in table["table"]] == [[1, 1], [1, 2], [1, 2]]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_json_and_latency_profiles(capsys, tmp_path) -> None:
    files = []
    for name, ms in (("small", 6.0), ("large", 27.9)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"model": name, "decode_ms": {"1": ms, "8": ms}}))
        files += ["--latency-profile", str(path)]
    system = ["--preset", "r2r", "--route-prob", "0.35", *files, "--quantum-ms", "0.1"]
    sim = run_json(
        capsys, ["simulate", *system, "--concurrency", "4", "--thresholds", "1,3", "--events", "20000"]
    )
    assert set(sim) == {"throughput_tok_s", "ci95", "events", "simulated_s"}
    lo, hi = sim["ci95"]
    assert lo < sim["throughput_tok_s"] < hi
    chain = run_json(capsys, ["throughput", *system, "--concurrency", "4", "--thresholds", "1,3"])
    assert sim["throughput_tok_s"] == pytest.approx(chain["throughput_tok_s"], rel=0.03)
    slow = run_json(capsys, ["simulate", *system, "--concurrency", "4", "--thresholds", "1,3", "--events", "20000",
                             "--handoff-ms", "3"])
    assert slow["ci95"][1] < lo  # 3 ms per hop against 6 / 27.9 ms steps: clearly slower
    traces = tmp_path / "traces.jsonl"
    traces.write_text('[0, 0, 1, 0]\n{"models": [0, 1, 0]}\n')
    replay = run_json(
        capsys,
        [
            "simulate",
            *system,
            "--concurrency",
            "2",
            "--thresholds",
            "1,1",
            "--events",
            "2000",
            "--traces",
            str(traces),
        ],
    )
    assert replay["throughput_tok_s"] > 0


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["throughput", *SYSTEM, "--concurrency", "4", "--thresholds", "3,3"], "deadlock"),
        (
            [
                "throughput",
                "--preset",
                "r2r",
                "--latency-ms",
                "6,27.9",
                "--concurrency",
                "2",
                "--thresholds",
                "1,1",
            ],
            "route probability",
        ),
        (["throughput", *SYSTEM[:4], "--concurrency", "2", "--thresholds", "1,1"], "latencies"),
        (["throughput", *SYSTEM, "--concurrency", "2", "--thresholds", "1"], "one threshold per model"),
        (["throughput", *SYSTEM, "--concurrency", "2", "--thresholds", "a"], "comma-separated integers"),
        (
            [
                "throughput",
                "--route-matrix",
                "1,1;1",
                "--latency-ms",
                "1,2",
                "--concurrency",
                "2",
                "--thresholds",
                "1,1",
            ],
            "square",
        ),
        (["optimize", *SYSTEM, "--concurrency", "2", "--fix", "5=1"], "there are 2 models"),
        (["optimize", *SYSTEM, "--concurrency", "2", "--plot", "x.txt"], "png"),
        (
            ["simulate", *SYSTEM, "--concurrency", "2", "--thresholds", "1,1", "--traces", "/nonexistent"],
            "not found",
        ),
        (
            [
                "throughput",
                *SYSTEM[:4],
                "--latency-profile",
                "/nonexistent.json",
                "--concurrency",
                "2",
                "--thresholds",
                "1,1",
            ],
            "not found",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, match) -> None:
    assert main(["model", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and match in err


def test_real_entry_point() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokenrouter",
            "model",
            "throughput",
            *SYSTEM,
            "--concurrency",
            "2",
            "--thresholds",
            "1,2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["throughput_tok_s"] == pytest.approx(110.32, abs=0.01)


def test_optimize_policy_optimal_prints_the_gap(capsys) -> None:
    fast = ["--preset", "r2r", "--route-prob", "0.35", "--latency-ms", "6.0,27.9", "--quantum-ms", "1.0"]
    out = run_json(capsys, ["optimize", "--policy", "optimal", *fast, "--max-concurrency", "4"])
    rows = {r["concurrency"]: r for r in out["table"]}
    assert sorted(rows) == [1, 2, 3, 4] and rows[4]["thresholds"] == [1, 3]
    assert rows[4]["optimal_tok_s"] > rows[4]["thresholds_tok_s"] and rows[4]["gap"] > 0
    assert rows[4]["local_tok_s"] >= rows[4]["thresholds_tok_s"] * (1 - 1e-9)
    assert main(["model", "optimize", "--policy", "optimal", *fast, "--concurrency", "3"]) == 0
    assert "| 3 | [1, 2] |" in capsys.readouterr().out
    assert main(["model", "optimize", "--policy", "optimal", *fast, "--concurrency", "3", "--fix", "0=1"]) == 2


def test_simulate_replays_a_runs_requests_jsonl(capsys, tmp_path) -> None:
    from tests.perfmodel.test_perfmodel_validity import r2r_rows

    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in r2r_rows(0.35, 40, 100)))
    argv = ["simulate", *SYSTEM, "--concurrency", "4", "--thresholds", "1,3", "--events", "5000", "--traces", str(path)]
    assert main(["model", *argv]) == 2  # no summary.json beside it and no --trace-models
    assert "--trace-models" in capsys.readouterr().err
    (tmp_path / "summary.json").write_text(json.dumps({"tokens_per_model": {"small": 1, "large": 1}}))
    out = run_json(capsys, argv)
    assert out["model_validity"]["in_regime"] is True
    assert out["throughput_tok_s"] == pytest.approx(out["chain_throughput_tok_s"], rel=0.05)
    assert main(["model", *argv, "--trace-models", "small,large"]) == 0
    assert "replayed the run's traces" in capsys.readouterr().out


def test_plot_title_names_the_setting() -> None:
    from tokenrouter.perfmodel.plot import setting_title
    from tokenrouter.perfmodel.spec import SystemSpec

    spec = SystemSpec.build([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [6.0, 27.9], quantum_ms=0.1)
    assert setting_title(spec) == "step 6 / 27.9 ms, route 0->1 0.35, 1->0 1.00, quantum 0.1 ms"
