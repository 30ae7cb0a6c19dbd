"""`tokenrouter report --format lm-eval`: a graded run as lm-eval's results/samples files (shape, score,
standard error, hashes), and clear errors for runs that cannot export. The comparison against files lm-eval
itself wrote for the same problems is the slow test in tests/server/test_lm_eval.py."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from tokenrouter.cli import main
from tokenrouter.evals.lm_eval_export import export_run, mean_stderr


def write_run(run: Path, correct: list[bool | None]) -> None:
    run.mkdir(parents=True)
    summary = {"workload": "arith", "model_set": "tiny", "system": "tokenrouter", "concurrency": 2,
               "elapsed_s": 1.5, "throughput_tok_s": 10.0, "provenance": {"git_commit": "abcdef123", "date": "d"}}
    (run / "summary.json").write_text(json.dumps(summary))
    rows = [{"index": i, "prompt_text": f"1+{i}", "gold": str(1 + i), "text": f"\\boxed{{{1 + i if c else 0}}}",
             "extracted": str(1 + i if c else 0), "correct": c, "output_ids": [1] * (3 + i),
             "model_runs": [["small", 2], ["large", 1 + i]], "finish_reason": "stop"} for i, c in enumerate(correct)]
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))


def test_export_writes_lm_eval_shaped_files(tmp_path: Path) -> None:
    write_run(tmp_path / "run", [True, False, True, True])
    results_path, samples_path = export_run(tmp_path / "run")
    assert results_path.parent == tmp_path / "run" and results_path.name.startswith("results_")
    assert samples_path.name.startswith("samples_tokenrouter_arith_")
    results = json.loads(results_path.read_text())
    task = results["results"]["tokenrouter_arith"]
    assert task["exact_match,none"] == 0.75
    assert task["exact_match_stderr,none"] == pytest.approx(math.sqrt(0.25 / 4))  # sample var 0.25, n 4
    assert results["n-samples"]["tokenrouter_arith"] == {"original": 4, "effective": 4}
    assert results["git_hash"] == "abcdef1" and results["tokenrouter"]["throughput_tok_s"] == 10.0
    samples = [json.loads(line) for line in samples_path.read_text().splitlines()]
    assert [s["doc_id"] for s in samples] == [0, 1, 2, 3] and [s["exact_match"] for s in samples] == [1, 0, 1, 1]
    first = samples[0]
    assert first["resps"] == [["\\boxed{1}"]] and first["filtered_resps"] == ["1"] and first["target"] == "1"
    assert first["prompt_hash"] == hashlib.sha256(b"1+0").hexdigest()
    assert first["model_runs"] == [["small", 2], ["large", 1]]
    joined = "".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in samples)
    assert results["task_hashes"]["tokenrouter_arith"] == hashlib.sha256(joined.encode()).hexdigest()


def test_cli_export_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_run(tmp_path / "sweep" / "0", [True])
    write_run(tmp_path / "sweep" / "1", [False, True])
    assert main(["report", "--format", "lm-eval", "--task", "t", "--out", str(tmp_path / "o"),
                 str(tmp_path / "sweep")]) == 0
    assert len(list((tmp_path / "o").rglob("results_*.json"))) == 2
    assert json.loads(next((tmp_path / "o" / "0").glob("results_*.json")).read_text())["results"]["t"][
        "exact_match_stderr,none"] == "N/A"  # one sample: lm-eval's N/A, never NaN
    write_run(tmp_path / "ungraded", [None])
    capsys.readouterr()
    assert main(["report", "--format", "lm-eval", str(tmp_path / "ungraded")]) == 2
    assert "graded workload" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", "--format", "lm-eval", str(tmp_path / "empty")]) == 2
    assert "no completed run" in capsys.readouterr().err


def test_mean_stderr_matches_lm_eval() -> None:
    lm_eval_metrics = pytest.importorskip("lm_eval.api.metrics")
    values = [1.0, 0.0, 1.0, 1.0, 0.0]
    assert mean_stderr(values) == pytest.approx(lm_eval_metrics.mean_stderr(values))
