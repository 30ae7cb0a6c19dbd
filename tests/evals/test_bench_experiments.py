"""Every experiment config composes, resolves its sweep dir and collects its sweep into results.csv; the
threshold-validation sweep covers exactly the feasible points."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra.core.global_hydra import GlobalHydra

from tokenrouter.cli import main
from tokenrouter.cli.bench import hydra_app, launch, output_dir
from tokenrouter.cli.hydra_config import compose, conf_dir
from tokenrouter.evals.run_record import build, write_summary

EXPERIMENTS = sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml"))
# one sweep of each shape runs by default (~5 s each); the others differ from one of these only in config groups
# that test_experiment_composes resolves for every experiment, and run with `-m slow`
SWEEP_SHAPES = {"demo", "pareto_amc23", "systems_sim", "table3", "threshold_validation", "tp_sweep"}
SWEEPS = [n if n in SWEEP_SHAPES else pytest.param(n, marks=pytest.mark.slow) for n in EXPERIMENTS]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes(name: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "-m", f"+experiment={name}", "--cfg", "job"]) == 0, capsys.readouterr().err
    assert "system:" in capsys.readouterr().out


def test_threshold_validation_points(tmp_path: Path) -> None:
    # the sweep's points, run cheaply with the in-process lock-step system (the real study uses tokenrouter)
    assert main(["bench", "-m", "+experiment=threshold_validation", "system=lockstep", "workload.num_requests=2",
                 "workload.output_tokens=2", f"hydra.sweep.dir={tmp_path}"]) == 0
    points = set()
    for path in tmp_path.glob("*/summary.json"):
        s = json.loads(path.read_text())
        n, (b0, b1) = s["concurrency"], s["thresholds_spec"]
        assert path.parent.name == f"N{n}_B1-{b1}" and b0 == 1
        points.add((n, b1))
    assert points == {(n, b1) for n in (2, 3, 4) for b1 in range(1, n + 1)}  # every feasible B1: B1 - 1 < N


def _dry_run(cfg: Any) -> dict:
    """A job that runs no model (most experiments need GPUs): it leaves what a finished run leaves."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    out = Path(HydraConfig.get().runtime.output_dir)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    summary = {"num_requests": 0, "throughput_tok_s": None, "model_names": [], "experiment": cfg.get("experiment_name")}
    return write_summary(out, build(summary, OmegaConf.to_container(cfg, resolve=True)))


@pytest.mark.parametrize("name", SWEEPS)
def test_experiment_sweep_dir_and_collection(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the sweep as `tokenrouter bench -m +experiment=NAME` launches it (no hydra.sweep.dir given), dry jobs
    monkeypatch.chdir(tmp_path)
    overrides = [f"+experiment={name}"]
    experiment = compose(overrides).get("experiment_name")
    try:
        hydra = hydra_app(conf_dir())
        sweep = output_dir(hydra, overrides, multirun=True)
        if experiment:
            assert sweep == tmp_path / "multirun" / experiment
        else:  # demo: `tokenrouter demo` passes its own sweep dir; plain bench falls back to Hydra's dated one
            assert sweep.is_relative_to(tmp_path / "multirun")
        returns, _ = launch(hydra, overrides, True, _dry_run)
    finally:
        GlobalHydra.instance().clear()
    jobs = [Path(r.hydra_cfg.hydra.runtime.output_dir) for batch in returns for r in batch]
    assert len(set(jobs)) == len(jobs) and all(j.is_relative_to(sweep) for j in jobs)  # distinct run dirs
    table = pd.read_csv(sweep / "results.csv")
    assert sorted(map(Path, table["run_dir"])) == sorted(jobs)


def test_experiment_sweep_collects_without_sweep_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a real (CPU, sim-engine) experiment sweep into its own multirun/<experiment> dir, as users run it
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "-m", "+experiment=systems_sim", "system=lockstep", "workload.num_requests=2",
                 "workload.output_tokens=2"]) == 0
    table = pd.read_csv(tmp_path / "multirun" / "systems_sim" / "results.csv")
    assert sorted(table["concurrency"]) == [4, 8] and set(table["experiment"]) == {"systems_sim"}
    assert all(Path(d).is_relative_to(tmp_path / "multirun" / "systems_sim") for d in table["run_dir"])
