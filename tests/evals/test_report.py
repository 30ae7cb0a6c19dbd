"""Result store and reports on run dirs written here (the layout `tokenrouter bench` leaves behind)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from tokenrouter.cli import main
from tokenrouter.errors import UserError
from tokenrouter.evals import paper
from tokenrouter.evals.plots import pareto_frontier
from tokenrouter.evals.report import write_reports
from tokenrouter.evals.run_record import build, write_summary
from tokenrouter.evals.store import find_run_dirs, load_requests, load_results

ROOT = Path(__file__).resolve().parents[2]


def make_run(root: Path, name: str, *, hydra: bool = True, summary: dict, **cfg: object) -> Path:
    """A run dir: resolved config, summary.json and a one-line requests.jsonl."""
    run = root / name
    (run / ".hydra" if hydra else run).mkdir(parents=True)
    config = {
        "models": {
            "name": cfg.pop("models", "tiny-random"),
            "members": [{"name": "small"}, {"name": "large"}],
        },
        "algorithm": {"name": cfg.pop("algorithm", "r2r"), "threshold": cfg.pop("router_threshold", 0.5)},
        "system": {"name": cfg.pop("system", "tokenrouter"), **cfg.pop("system_fields", {})},
        "workload": {
            "name": cfg.pop("workload", "synthetic"),
            "output_tokens": 8,
            "max_new_tokens": "${.output_tokens}",
        },
        "runtime": {
            "thresholds": cfg.pop("thresholds", "auto"),
            "delayed_batching": cfg.pop("delayed_batching", True),
            "max_wait_ms": cfg.pop("runtime_wait", 50.0),
            "max_batch_size": cfg.pop("runtime_batch", 256),
        },
        "concurrency": cfg.pop("concurrency", 4),
        "seed": 0,
        **cfg,
    }
    OmegaConf.save(OmegaConf.create(config), run / (".hydra/config.yaml" if hydra else "config.yaml"))
    resolved = OmegaConf.to_container(OmegaConf.create(config), resolve=True)
    write_summary(run, build({"model_names": ["small", "large"], "num_requests": 1, "throughput_tok_s": None,
                              **summary}, resolved))
    (run / "requests.jsonl").write_text(
        json.dumps({"index": 0, "output_ids": [1, 2], "latency_s": 0.5}) + "\n"
    )
    return run


def thr(value: float, **extra: object) -> dict:
    return {"throughput_tok_s": value, **extra}


def graded(per_request: float, accuracy: float, share: float) -> dict:
    return {
        "throughput_tok_s": per_request * 4,
        "per_request_throughput_tok_s": per_request,
        "accuracy": accuracy,
        "accuracy_ci95_low": accuracy - 0.1,
        "accuracy_ci95_high": min(accuracy + 0.1, 1.0),
        "large_token_share": share,
        "token_share": {"small": 1 - share, "large": share},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    table3 = root / "table3"
    for models, (lock, off, tr) in {
        "qwen3-0.6b-8b": (90.0, 60.0, 300.0),
        "tiny-random": (20.0, None, 50.0),
    }.items():
        make_run(table3, f"{models}-tr", models=models, experiment="table3",
                 summary=thr(tr, mean_output_tokens=100.0, large_token_share=0.3))
        make_run(
            table3, f"{models}-lock", models=models, system="lockstep", experiment="table3",
            summary=thr(lock, mean_output_tokens=96.0, large_token_share=0.32),
        )
        if off is not None:
            make_run(
                table3,
                f"{models}-off",
                models=models,
                system="official_r2r",
                experiment="table3",
                summary=thr(off),
            )
    pareto = root / "pareto"
    common = {"workload": "amc23", "experiment_name": "pareto_amc23"}
    single = {"workload": "amc23", "experiment_name": "pareto_amc23_single", "system": "single"}
    make_run(pareto, "weak", system_fields={"model": "small"}, summary=graded(40, 0.30, 0.0), **single)
    make_run(pareto, "strong", system_fields={"model": "large"}, summary=graded(8, 0.70, 1.0), **single)
    for i, (speed, acc, share) in enumerate(
        [(30, 0.50, 0.1), (25, 0.62, 0.2), (20, 0.60, 0.35), (15, 0.68, 0.5)]
    ):
        make_run(pareto, f"tr{i}", router_threshold=0.1 * i, summary=graded(speed, acc, share), **common)
        make_run(pareto, f"lock{i}", system="lockstep", router_threshold=0.1 * i, summary=graded(speed / 3, acc, share),
                 **common)
    for i, share in enumerate([0.25, 0.5, 0.75]):
        make_run(
            pareto,
            f"q{i}",
            system="query_routing",
            system_fields={"strong_share": share},
            summary=graded(40 - 30 * share, 0.3 + 0.4 * share, share),
            **common,
        )
    validation = root / "validation"
    for n in (2, 3):
        for b in (1, 2, 3):
            measured, predicted = 100 + 10 * n - 5 * (b - 2) ** 2, 105 + 10 * n - 6 * (b - 2) ** 2
            make_run(
                validation,
                f"n{n}b{b}",
                models="sim-r2r",
                thresholds=[1, b],
                concurrency=n,
                hydra=False,
                experiment="threshold_validation",
                # steady (no drain tail) is what the plot compares; the total/elapsed figure is lower
                summary=thr(measured - 20, steady_throughput_tok_s=measured, predicted_throughput_tok_s=predicted),
            )
    ablation = root / "ablation"
    at = {"models": "qwen3-0.6b-32b", "workload": "low_effort"}  # each study's own setting, as conf/experiment's
    for n in (1, 4, 8):
        make_run(ablation, f"full{n}", concurrency=n, experiment="ablation", summary=thr(30.0 * n), **at)
        make_run(
            ablation,
            f"nodb{n}",
            concurrency=n,
            delayed_batching=False,
            experiment="ablation",
            summary=thr(25.0 * n),
            **at,
        )
        make_run(
            ablation,
            f"off{n}",
            concurrency=n,
            system="official_r2r",
            experiment="ablation",
            summary=thr(10.0 * n),
            **at,
        )
        make_run(
            ablation,
            f"lock{n}",
            concurrency=n,
            system="lockstep",
            ablation_variant="lockstep",
            experiment="ablation",
            summary=thr(20.0 * n),
            **at,
        )
    sweep = root / "concurrency"
    for n in (1, 2, 4, 8, 16):
        for system, scale in (("tokenrouter", 1.0), ("lockstep", 0.5)):
            make_run(
                sweep,
                f"{system}{n}",
                system=system,
                concurrency=n,
                workload="mixed",
                experiment="concurrency_sweep",
                summary=thr(50 * scale * n**0.8, per_request_throughput_tok_s=50 * scale * n**-0.2),
            )
    systems = root / "systems"
    for n, (tr, ls) in {4: (200.0, 140.0), 8: (380.0, 240.0)}.items():
        for system, value, predicted in (("tokenrouter", tr, 1.05 * tr), ("lockstep", ls, ls)):
            make_run(systems, f"{system}{n}", system=system, models="sim-r2r", concurrency=n, experiment="systems_sim",
                     summary=thr(value, steady_throughput_tok_s=1.02 * value, predicted_throughput_tok_s=predicted,
                                 mean_output_tokens=value / 10, large_token_share=0.35))
    load = root / "load"
    for rate in (1.0, 2.0, 4.0):
        for system, slow in (("tokenrouter", 1.0), ("lockstep", 2.0)):
            make_run(load, f"{system}{rate}", system=system, arrival="poisson", request_rate=rate,
                     experiment="rate_sweep",
                     summary=thr(100 * rate, request_rate=rate, mean_latency_s=slow * rate, p99_latency_s=3 * rate))
    return root


def test_result_store(runs: Path) -> None:
    df = load_results([runs / "table3", runs / "validation"])
    assert len(df) == 5 + 6 == len(find_run_dirs([runs / "table3", runs / "validation"]))
    row = df[df["run_dir"].str.endswith("qwen3-0.6b-8b-off")].iloc[0]
    assert (row["system"], row["algorithm"], row["models"], row["concurrency"]) == (
        "official_r2r",
        "r2r",
        "qwen3-0.6b-8b",
        4,
    )
    assert row["cfg.workload.max_new_tokens"] == 8  # interpolations resolved
    assert json.loads(row["cfg.models.members"])[1]["name"] == "large"
    v = df[df["models"] == "sim-r2r"]
    assert set(v["threshold_large"]) == {1.0, 2.0, 3.0} and v["thresholds"].iloc[0].startswith("[1, ")
    assert len(load_requests(row["run_dir"])) == 1
    with pytest.raises(UserError, match="no run directories"):
        load_results([runs / "table3" / "tiny-random-tr" / ".hydra"])
    with pytest.raises(UserError, match="does not exist"):
        load_results([runs / "missing"])


def test_reports(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    written = write_reports(load_results([runs]), out)
    names = {p.name for p in written}
    expected = {
        "runs.csv",
        "table3.md",
        "table3.csv",
        "table3.tex",
        "pareto_amc23.png",
        "pareto_amc23.pdf",
        "threshold_validation.png",
        "threshold_validation.pdf",
        "threshold_validation.csv",
        "ablation.md",
        "load.csv",
        "load.png",
        "load.pdf",
        "systems.md",
        "systems.csv",
        "systems.tex",
        "concurrency.png",
        "concurrency.csv",
        "query_level.md",
        "query_level.png",
    }
    assert expected <= names
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)

    t3 = pd.read_csv(out / "table3.csv")
    big = t3[t3["pair"] == "0.6B/8B"].iloc[0]
    assert big["TokenRouter tok/s"] == 300 and big["gain vs lockstep"] == pytest.approx(300 / 90)
    assert big["gain vs official"] == pytest.approx(5.0) and big["paper TokenRouter tok/s"] == 336.98
    # outputs may differ between systems on GPU: each system's output length and large share are reported
    assert big["TokenRouter output tokens"] == 100 and big["R2R lockstep output tokens"] == 96
    assert big["TokenRouter large share"] == 0.3 and big["R2R lockstep large share"] == 0.32
    assert pd.isna(big["R2R official output tokens"])  # its runs carry no output statistics here
    tiny = t3[(t3["pair"] == "tiny-random") & (t3["workload.name"] == "synthetic")].iloc[0]
    assert tiny["TokenRouter tok/s"] == 50 and pd.isna(tiny["R2R official tok/s"]) and pd.isna(tiny["paper gain"])
    # every configuration both systems ran is a row, the keys in which rows differ are columns: the pareto sweep's
    # thresholds (its lock-step runs at the same thresholds), the ablation's N; the paper's figures at N=4 only
    amc = t3[t3["workload.name"] == "amc23"].set_index("algorithm.threshold")
    assert list(amc.index) == pytest.approx([0.0, 0.1, 0.2, 0.3]) and amc.iloc[1]["gain vs lockstep"] == pytest.approx(3.0)
    # the ablation's runs: lock-step (no delayed batching to switch) beside TokenRouter with it on and off
    main_pair = t3[t3["pair"] == "0.6B/32B"].set_index(["N", "runtime.delayed_batching"])
    assert len(main_pair) == 6 and main_pair.loc[(8, False), "R2R lockstep tok/s"] == 160
    assert main_pair.loc[(8, False), "TokenRouter tok/s"] == 200 and main_pair.loc[(8, True), "TokenRouter tok/s"] == 240
    assert main_pair.loc[(4, True), "paper R2R tok/s"] == 77.08 and pd.isna(main_pair.loc[(8, True), "paper R2R tok/s"])
    assert pd.isna(main_pair.loc[(4, False), "paper R2R tok/s"])  # the paper's figures are of the full runtime
    assert (
        "0.6B/8B" in (out / "table3.md").read_text()
        and "\\begin{tabular}" in (out / "table3.tex").read_text()
    )

    ab = pd.read_csv(out / "ablation.csv")
    ab = ab[ab["workload.name"] == "low_effort"].set_index("variant")
    assert ab.loc["w/o delayed batching", "N=8 tok/s"] == 200 and ab.loc["full", "paper N=8 (GPU)"] == 372.48
    assert (
        ab.loc["w/o delayed batching, w/o async", "N=4 tok/s"] == 80
        and ab.loc["official R2R", "N=1 tok/s"] == 10
    )
    assert ab.loc["w/o delayed batching, w/o async", "paper N=4 (GPU)"] == 143.88
    assert [c for c in ab.columns if c.endswith("tok/s")] == [f"N={n} tok/s" for n in (16, 8, 4, 2, 1)]

    tv = pd.read_csv(out / "threshold_validation.csv")
    assert len(tv) == 6 and tv["rel_error"].abs().max() < 0.1
    assert tv["measured_tok_s"].min() >= 100  # the steady figure, not the lower total / elapsed

    conc = pd.read_csv(out / "concurrency.csv")
    # one line per configuration: the sweep's (workload mixed) apart from the ablation's at N=1,4,8
    tr16 = conc[(conc["series"] == "tokenrouter (r2r) · workload.name=mixed") & (conc["concurrency"] == 16)].iloc[0]
    assert tr16["throughput_scale"] == pytest.approx(16**0.8) and tr16["per_request_kept"] == pytest.approx(
        16**-0.2
    )

    systems = pd.read_csv(out / "systems.csv").set_index("N")
    assert systems.loc[8, "ratio"] == pytest.approx(380 / 240) and systems.loc[8, "predicted ratio"] == pytest.approx(
        1.05 * 380 / 240)
    assert systems.loc[4, "difference %"] == pytest.approx(100 * (1 / 1.05 - 1))  # steady cancels out in ratios
    assert systems.loc[4, "difference % (steady)"] == pytest.approx(100 * (1 / 1.05 - 1))
    assert systems.loc[8, "tokenrouter output tokens"] == 38 and systems.loc[8, "lockstep output tokens"] == 24
    assert systems.loc[8, "lockstep large share"] == pytest.approx(0.35)

    load = pd.read_csv(out / "load.csv").set_index(["series", "request_rate"])
    assert len(load) == 6 and load.loc[("lockstep (r2r)", 4.0), "mean_latency_s"] == 8.0
    assert load.loc[("tokenrouter (r2r)", 2.0), "throughput_tok_s"] == 200.0

    ql = pd.read_csv(out / "query_level.csv").set_index("method")
    assert ql.loc["query-level routing", "APGR"] == pytest.approx(0.5)  # points on the random-mix line
    assert (
        ql.loc["query-level routing", "routing"] == "query"
        and ql.loc["tokenrouter (r2r)", "routing"] == "token"
    )
    assert ql.loc["tokenrouter (r2r)", "APGR"] > 0.5 and ql.loc["tokenrouter (r2r)", "CPT(50%)"] < 0.5

    pareto = pd.read_csv(out / "pareto_amc23.csv")
    assert set(pareto["series"]) >= {
        "tokenrouter (r2r)",
        "lockstep (r2r)",
        "query-level routing",
        "single (small)",
    }


def test_reports_only_what_runs_support(runs: Path, tmp_path: Path) -> None:
    written = {p.name for p in write_reports(load_results([runs / "validation"]), tmp_path)}
    assert written == {
        "runs.csv",
        "report.html",
        "threshold_validation.csv",
        "threshold_validation.png",
        "threshold_validation.pdf",
        # fixed thresholds at N=2 and 3: each a line over N
        "concurrency.csv",
        "concurrency.png",
        "concurrency.pdf",
        # TokenRouter runs with no lock-step twin: table3, ablation and systems say they left them out
        "left_out.md",
        "left_out.csv",
        "left_out.tex",
    }
    notes = pd.read_csv(tmp_path / "left_out.csv")
    assert list(notes["report"]) == ["table3", "ablation", "systems"] and set(notes["runs"]) == {6}


def test_pareto_frontier() -> None:
    pts = pd.DataFrame({"x": [1, 2, 3, 4, 2.5], "y": [0.9, 0.8, 0.85, 0.5, 0.7]})
    assert pareto_frontier(pts, "x", "y")[["x", "y"]].values.tolist() == [[1, 0.9], [3, 0.85], [4, 0.5]]


def test_cli_report(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "tokenrouter", "report", str(runs / "table3"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "5 runs" in proc.stdout and str(out / "table3.md") in proc.stdout and (out / "table3.tex").is_file()
    )


def test_cli_report_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert main(["report", str(tmp_path)]) == 2  # exists, but holds no run
    assert "no run directories found" in capsys.readouterr().err
    assert main(["report"]) == 2


def test_paper_figures_match_paper_md() -> None:
    """The restated Table 3 figures equal the paper's text (where a copy of it, PAPER.md, is found beside the
    checkout)."""
    path = ROOT.parent / "shared" / "PAPER.md"
    if not path.is_file():
        pytest.skip("no copy of the paper's text to check the restated figures against")
    text = path.read_text()
    line = text[text.index("- Table 3") :].split("\n- ")[0]  # the bullet with its continuation lines
    found = {
        pair: (float(a), float(b), float(g))
        for pair, a, b, g in re.findall(r"(\d+(?:\.\d+)?B/\d+B) ([\d.]+) vs ([\d.]+) \(([\d.]+)x\)", line)
    }
    assert found == paper.TABLE3


def test_reports_select_runs_by_what_they_are_not_by_experiment_name(tmp_path: Path) -> None:
    """The same runs under any experiment names (a shipped one, a user's own, none) give the same reports: a new
    algorithm's sweep lands on the Pareto plot beside pareto_* runs and a table3 run is a Table 3 row wherever
    it was launched."""
    def sweep(root: Path, names: list[str | None]) -> pd.DataFrame:
        for i, (threshold, experiment) in enumerate(zip((0.3, 0.6), names[:2], strict=True)):
            tag = {"experiment_name": experiment} if experiment else {}
            make_run(root, f"tr{i}", workload="amc23", router_threshold=threshold, **tag,
                     summary=graded(30 - 10 * i, 0.6 + 0.1 * i, 0.2))
            make_run(root, f"lock{i}", workload="amc23", system="lockstep", router_threshold=threshold, **tag,
                     summary=graded(10 - 3 * i, 0.6 + 0.1 * i, 0.2))
        tag = {"experiment_name": names[2]} if names[2] else {}
        make_run(root, "entropy", workload="amc23", algorithm="entropy", **tag, summary=graded(25, 0.65, 0.15))
        return load_results([root])

    reports = []
    for k, names in enumerate([["pareto_amc23", "table3", "entropy_sweep"], [None, None, None]]):
        out = tmp_path / f"out{k}"
        write_reports(sweep(tmp_path / f"runs{k}", names), out)
        reports.append({stem: pd.read_csv(out / f"{stem}.csv") for stem in ("table3", "pareto_amc23")})
    for stem in ("table3", "pareto_amc23"):
        pd.testing.assert_frame_equal(reports[0][stem], reports[1][stem])
    assert list(reports[0]["table3"]["algorithm.threshold"]) == [0.3, 0.6]
    assert {"tokenrouter (entropy)", "tokenrouter (r2r)", "lockstep (r2r)"} == set(reports[0]["pareto_amc23"]["series"])


def test_a_rerun_with_one_value_changed_is_never_merged_with_the_original(tmp_path: Path) -> None:
    """Runs of a sweep and its rerun with one knob changed (into another dir) stay apart in every report: a
    Table 3 row and a Pareto series per value, labelled with it; a TokenRouter run whose only lock-step runs
    are of another configuration is left out, naming the key."""
    for wait in (50.0, 5.0):
        for system, speed in (("tokenrouter", 30.0 if wait == 50.0 else 20.0), ("lockstep", 10.0)):
            make_run(tmp_path / f"wait{wait}", system, system=system, workload="amc23", runtime_wait=wait,
                     summary=graded(speed, 0.6, 0.2))
    make_run(tmp_path / "batched", "tokenrouter", workload="amc23", runtime_batch=64, summary=graded(25, 0.6, 0.2))
    out = tmp_path / "out"
    write_reports(load_results([tmp_path]), out)
    t3 = pd.read_csv(out / "table3.csv").set_index("runtime.max_wait_ms")
    assert t3.loc[50.0, "TokenRouter tok/s"] == 120 and t3.loc[5.0, "TokenRouter tok/s"] == 80
    assert len(t3) == 2 and t3["R2R lockstep tok/s"].tolist() == [40, 40]
    series = set(pd.read_csv(out / "pareto_amc23.csv")["series"])
    # 3 TokenRouter series, each naming only what sets it apart; one lock-step series (it reads no max_wait_ms)
    assert series == {"tokenrouter (r2r) · runtime.max_batch_size=256 · runtime.max_wait_ms=5.0",
                      "tokenrouter (r2r) · runtime.max_batch_size=256 · runtime.max_wait_ms=50.0",
                      "tokenrouter (r2r) · runtime.max_batch_size=64", "lockstep (r2r)"}
    notes = pd.read_csv(out / "left_out.csv")
    note = notes[notes["report"] == "table3"].iloc[0]
    assert note["runs"] == 1 and "runtime.max_batch_size" in note["why"] and "batched/tokenrouter" in note["run dirs"]
    assert "Runs left out" in (out / "report.html").read_text()
