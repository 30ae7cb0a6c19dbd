"""`tokenrouter demo`: its config composes into valid runs, its sweep bookkeeping, its conclusions from a runs
table (pairs, ratios, frontier verdict, report files), and the whole command end to end (--smoke)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tokenrouter.cli import demo, main
from tokenrouter.cli.hydra_config import compose
from tokenrouter.config import model_specs
from tokenrouter.errors import UserError
from tokenrouter.evals import demo_summary as ds
from tokenrouter.evals.run_record import build, write_summary
from tokenrouter.evals.store import load_results


def test_demo_config_composes_every_sweep_point(capsys: pytest.CaptureFixture) -> None:
    cfg = compose(["+experiment=demo"])
    assert cfg.models.name == "tiny" and cfg.workload.name == "arith" and cfg.concurrency == 8
    assert main(["bench", "--cfg", "all", "--resolve", "+experiment=demo"]) == 0
    hydra = capsys.readouterr().out
    assert "dir: multirun/demo" in hydra and "tokenrouter.cli.demo.SweepProgress" in hydra
    # router paths (passed as ++models.routers.<algorithm>=PATH) never become part of a run's dir name
    assert all(f"- models.routers.{alg}\n" in hydra for alg in cfg.demo.routers.algorithms)
    def values(sweep: list[str], key: str) -> set[str]:
        return {v for o in sweep if o.startswith(f"{key}=") for v in o.split("=", 1)[1].split(",")}

    systems = set()
    for sweep in map(list, cfg.demo.sweeps):
        first = [o for o in demo.first_point(sweep) if not o.startswith("system=")]
        for system in values(sweep, "system"):
            point = compose(["+experiment=demo", "++models.routers.r2r=/some/router.json", *first, f"system={system}"])
            systems.add(point.system.name)
            assert len(model_specs(point.models)) == 2
            if point.algorithm.name == "r2r":
                assert point.algorithm.router == "/some/router.json"  # the demo's router reaches R2R
            # no delayed batching, chosen in the config (with its reason), not a fallback for want of step
            # latencies; a knob every system takes, one model or two
            assert point.runtime.delayed_batching is False
    assert systems == {"single", "tokenrouter", "lockstep", "query_routing"}
    # the Table 3 pair exists: lock-step runs an R2R threshold that TokenRouter also runs

    def thresholds(system: str) -> set[str]:
        return {v for s in map(list, cfg.demo.sweeps) if system in values(s, "system") and "algorithm=r2r" in s
                for v in values(s, "algorithm.threshold")}

    assert thresholds("lockstep") and thresholds("lockstep") <= thresholds("tokenrouter")


def test_sweep_points_and_first_point() -> None:
    sweep = ["system=tokenrouter", "algorithm.threshold=0.3,0.5,0.7", "system.strong_share=0.1,0.2"]
    assert demo.sweep_points(sweep) == 6
    assert demo.sweep_points(["system=single"]) == 1
    assert demo.first_point(sweep) == ["system=tokenrouter", "algorithm.threshold=0.3", "system.strong_share=0.1"]
    compared = ["algorithm.threshold=0.5,0.9", "system=tokenrouter,lockstep"]  # --smoke keeps every system
    assert demo.first_point(compared) == ["algorithm.threshold=0.5", "system=tokenrouter,lockstep"]
    assert demo.sweep_points(compared) == 4 and demo.sweep_points(demo.first_point(compared)) == 2


def test_sweep_dir_resumes_only_its_own_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep_dir = tmp_path / "runs"
    stamp = {"models": "abc", "router": "r.json"}
    demo.prepare_sweep_dir(sweep_dir, stamp, fresh=False)
    (sweep_dir / "point").mkdir()
    demo.prepare_sweep_dir(sweep_dir, stamp, fresh=False)
    assert (sweep_dir / "point").is_dir()  # same models and router: earlier runs kept
    demo.prepare_sweep_dir(sweep_dir, {**stamp, "models": "other"}, fresh=False)
    assert not (sweep_dir / "point").exists() and "other models" in capsys.readouterr().out
    (sweep_dir / "point").mkdir()
    demo.prepare_sweep_dir(sweep_dir, {**stamp, "models": "other"}, fresh=True)
    assert not (sweep_dir / "point").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("x")
    with pytest.raises(UserError, match="not demo runs"):
        demo.prepare_sweep_dir(foreign, stamp, fresh=True)
    assert (foreign / "precious.txt").is_file()


def _run(root: Path, name: str, system: dict, algorithm: dict, **summary: float) -> None:
    """A run dir as `tokenrouter bench` leaves it (resolved config + summary)."""
    run = root / name
    run.mkdir(parents=True)
    cfg = {"system": system, "algorithm": algorithm, "models": {"name": "tiny"}, "workload": {"name": "arith"},
           "concurrency": 8, "runtime": {"thresholds": "auto"}}
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    acc = summary["accuracy"]
    full = {"num_requests": 40, "num_graded": 40, "accuracy_ci95_low": max(0.0, acc - 0.1),
            "accuracy_ci95_high": min(1.0, acc + 0.1),
            "mean_latency_s": 1.0, "handoffs_per_request": 1.0, **summary}
    write_summary(run, build({"model_names": ["small", "large"], "throughput_tok_s": None, **full}, cfg))


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    r2r = {"name": "r2r", "router": "/r.json"}
    _run(root, "small", {"name": "single", "model": "small"}, r2r, accuracy=0.2, throughput_tok_s=300.0,
         per_request_throughput_tok_s=60.0, large_token_share=0.0)
    _run(root, "large", {"name": "single", "model": "large"}, r2r, accuracy=0.9, throughput_tok_s=100.0,
         per_request_throughput_tok_s=20.0, large_token_share=1.0)
    for t, acc, tput in ((0.3, 0.85, 150.0), (0.7, 0.6, 220.0)):
        _run(root, f"tr{t}", {"name": "tokenrouter"}, {**r2r, "threshold": t}, accuracy=acc, throughput_tok_s=tput,
             per_request_throughput_tok_s=tput / 5, large_token_share=0.3)
    _run(root, "rs", {"name": "tokenrouter"}, {"name": "rstitch", "tau": 0.1}, accuracy=0.5, throughput_tok_s=500.0,
         per_request_throughput_tok_s=100.0, large_token_share=0.2)
    _run(root, "lock", {"name": "lockstep"}, {**r2r, "threshold": 0.3}, accuracy=0.85, throughput_tok_s=60.0,
         per_request_throughput_tok_s=12.0, large_token_share=0.3)
    _run(root, "q50", {"name": "query_routing", "strong_share": 0.5}, r2r, accuracy=0.55, throughput_tok_s=180.0,
         per_request_throughput_tok_s=36.0, large_token_share=0.5)
    return root


def test_conclusions_pair_like_with_like(runs: Path) -> None:
    df = load_results([runs])
    pairs = ds.lockstep_pairs(df)
    assert sorted(pairs["system"]) == ["lockstep", "tokenrouter"]  # only the threshold-0.3 twin, no R-Stitch
    (ratio,) = ds.throughput_ratios(pairs)
    assert ratio["settings"] == "threshold=0.3" and ratio["ratio"] == pytest.approx(150.0 / 60.0)
    assert ds.single_accuracies(df)["large"]["accuracy"] == 0.9
    # q50 (0.55, 36/s) is beaten by TokenRouter R2R at 0.7 (0.6, 44/s)
    assert ds.dominance(df).dominated == 1 and "dominates" in ds.dominance(df).verdict
    table = ds.summary_table(df)
    labels = set(table["series"] + " " + table["setting"])
    assert {"single (small) model=small", "query-level routing strong_share=0.5", "tokenrouter (rstitch) tau=0.1"} <= labels
    assert len(table) == 7 and table["large token share"].between(0, 1).all()


def test_frontier_verdict_reports_a_loss(runs: Path, tmp_path: Path) -> None:
    _run(runs, "q90", {"name": "query_routing", "strong_share": 0.9}, {"name": "r2r"}, accuracy=0.95,
         throughput_tok_s=110.0, per_request_throughput_tok_s=22.0, large_token_share=0.9)
    verdict = ds.dominance(load_results([runs]))
    assert (verdict.query_points, verdict.dominated) == (2, 1) and "does not dominate" in verdict.verdict


def test_report_files_and_closing_note(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    figures = {"models": "tiny", "workload": "arith", "N": 8, "problems": 40, "query_level_note": None,
               "step_ms": {"small": {"1": 1.0, "8": 2.0}, "large": {"1": 6.0, "8": 9.0}},
               "routers": {"r2r": {"threshold": 0.4, "heldout_auc": 0.81}}, "phases": {"sweeps": 61.0}, "failed": []}
    written = demo.write_report(runs, out, figures)
    names = {p.name for p in written}
    assert {"runs.csv", "pareto_arith.png", "table3.md", "summary.md", "query_level.md", "report.html"} <= names
    assert all(p.is_file() for p in written)
    table3 = (out / "table3.md").read_text()
    assert "150.00" in table3 and "60.00" in table3  # R2R at threshold 0.3 on both systems, R-Stitch left out
    note = demo.closing_note(figures, sorted(names))
    assert "accuracy 90.0%" in note and "6.0x" in note and "r2r router: held-out AUC 0.810" in note and "2.50x" in note
    assert "token-level routing dominates" in note


def test_bad_option_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert main(["demo", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bogus" in err


@pytest.mark.slow  # 47 s of the default suite's 10 min; `make demo` runs the whole command, `pytest -m slow` this
def test_demo_smoke_end_to_end(tmp_path: Path) -> None:
    """The whole command on the tiny random pair (~30 s on 2 idle cores): router training, every sweep at one
    point, the report; then a rerun that resumes (keeps every finished run)."""
    out, sweep = tmp_path / "out", tmp_path / "runs"
    argv = ["demo", "--smoke", "--out", str(out), "--sweep-dir", str(sweep), "models=tiny-random"]
    assert main(argv) == 0
    assert {"runs.csv", "summary.md", "table3.md", "demo.md", "demo.json", "report.html"} <= \
        {p.name for p in out.iterdir()}
    traced = {json.loads((p.parent / "summary.json").read_text())["system"] for p in sweep.glob("*/trace.json")}
    assert {"tokenrouter", "lockstep"} <= traced
    page = (out / "report.html").read_text()
    assert 'id="timeline"' in page and 'id="tokens"' in page and "lockstep (r2r)" in page
    figures = json.loads((out / "demo.json").read_text())
    assert set(figures["step_ms"]) == {"small", "large"} and figures["failed"] == []
    stamp_mtime = (sweep / demo.STAMP_FILE).stat().st_mtime_ns
    summaries = {p: p.stat().st_mtime_ns for p in sweep.glob("*/summary.json")}
    assert len(summaries) >= 4
    (small,) = [json.loads(p.read_text()) for p in summaries if "system.model=small" in str(p)]
    assert small["large_token_share"] == 0.0  # the weak end of the query-level axis
    assert main(argv) == 0  # a rerun resumes: every run is kept
    assert {p: p.stat().st_mtime_ns for p in sweep.glob("*/summary.json")} == summaries
    assert (sweep / demo.STAMP_FILE).stat().st_mtime_ns >= stamp_mtime


def test_rerun_removes_only_its_own_earlier_files(tmp_path: Path) -> None:
    (tmp_path / "demo.json").write_text(json.dumps({"files": ["query_level.png", "../outside.txt"]}))
    (tmp_path / "query_level.png").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path.parent / "outside.txt").write_text("not the demo's")
    demo.remove_previous(tmp_path)
    assert not (tmp_path / "query_level.png").exists()
    assert (tmp_path / "notes.txt").is_file() and (tmp_path.parent / "outside.txt").is_file()


def test_output_dir_is_fresh_and_never_the_reference(tmp_path: Path) -> None:
    from tokenrouter.cli.demo_reference import REFERENCE_DIR

    fresh = demo.output_dir(None, smoke=True)
    assert fresh.parts[:2] == ("runs", "demo") and fresh.name.endswith("-smoke")
    assert demo.output_dir(tmp_path / "x", smoke=False) == tmp_path / "x"
    for bad in (REFERENCE_DIR, REFERENCE_DIR / "sub"):
        with pytest.raises(UserError, match="committed reference"):
            demo.output_dir(bad, smoke=False)


def test_repeats_make_one_point_and_the_reference_sits_beside_the_run(runs: Path) -> None:
    from tokenrouter.cli.demo_reference import comparison_lines

    r2r = {"name": "r2r", "router": "/r.json"}
    for seed, tput in ((1, 170.0), (2, 130.0)):  # two more repeats of TokenRouter R2R at threshold 0.3
        _run(runs, f"tr0.3-seed{seed}", {"name": "tokenrouter"}, {**r2r, "threshold": 0.3}, accuracy=0.85,
             throughput_tok_s=tput, per_request_throughput_tok_s=tput / 5, large_token_share=0.3)
    df = load_results([runs])
    pts = ds.points(df)
    (point,) = pts[(pts["series"] == "tokenrouter (r2r)") & (pts["setting"] == "threshold=0.3")].itertuples()
    assert point.repeats == 3 and point.throughput_tok_s == pytest.approx(150.0) and point.throughput_tok_s_std > 0
    assert "no TokenRouter point within 3%" in ds.near_large(df)  # 0.85 is 5 points below the large model
    assert ds.near_large(df, within=0.05).startswith("tokenrouter (r2r) threshold=0.3")
    run = {"accuracy": {"large": {"accuracy": 0.9}}, "frontier_points": {"x": [1, 3]}, "frontier": {"x": "..."}}
    lines = comparison_lines(run, {"accuracy": {"large": {"accuracy": 0.8}, "small": {"accuracy": 0.1}}})
    assert "| large model alone: accuracy | 90.0% | 80.0% |" in lines
    assert "| small model alone: accuracy | -- | 10.0% |" in lines and "| query-level points matched or beaten (x) | 1 of 3 | -- |" in lines


def test_oracle_query_router_from_per_problem_correctness(runs: Path, tmp_path: Path) -> None:
    from tokenrouter.evals.oracle import oracle_curve
    from tokenrouter.evals.report import ORACLE, query_level

    for name, correct in (("small", [True, False, False, False]), ("large", [True, True, True, False])):
        rows = [{"index": i, "correct": c} for i, c in enumerate(correct)]
        (runs / name / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = load_results([runs])
    # weak right on 1 of 4; strong right where weak is wrong on 2 of 4: the oracle reaches 3/4 at share 1/2
    assert oracle_curve(df[df["system"] == "single"]) == [(0.0, 0.25), (0.5, 0.75), (1.0, 0.75)]
    query_level(df, tmp_path)
    assert ORACLE in (tmp_path / "query_level.md").read_text() and (tmp_path / "query_level.png").is_file()
