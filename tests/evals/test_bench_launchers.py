"""Launcher and sweeper configs of `tokenrouter bench -m` (fast: nothing launched but the basic launcher):
resources computed from the model set, the objective a run returns, and one-line refusals (exit 2) for a
missing plugin, a bad objective or a request no local Ray cluster can meet."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tokenrouter.cli import main
from tokenrouter.cli.bench import _compose, hydra_app
from tokenrouter.cli.hydra_config import conf_dir
from tokenrouter.cli.job_resources import JobResources
from tokenrouter.errors import UserError
from tokenrouter.evals.objective import OBJECTIVES, objective_names, objective_values

ROOT = Path(__file__).resolve().parents[2]
SIM = ["models=sim-r2r", "system=lockstep", "workload.num_requests=6", "workload.output_tokens=12"]


def composed(*overrides: str) -> Any:
    try:
        return _compose(hydra_app(conf_dir()), list(overrides), multirun=True)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize(("models", "gpus", "cpus"), [
    ("sim-r2r", 0, 3),
    ("tiny", 0, 3),
    ("qwen3-0.6b-32b", 2, 4),      # small TP1 on cuda:0 + large TP2 on cuda:0-1: two GPUs, not three
    ("qwen3-0.6b-8b-32b", 3, 4),   # cuda:0, cuda:1, cuda:2
])
def test_resources_of_shipped_model_sets(models: str, gpus: int, cpus: int) -> None:
    need = JobResources.of_members(composed(f"models={models}").models.members)
    assert (need.gpus, need.cpus) == (gpus, cpus)


def test_resources_follow_device_and_tp() -> None:
    members = [{"name": "a", "source": "x", "device": "cuda:1", "tp": 2, "threads": 3},
               {"name": "b", "engine": "sim"}]
    assert JobResources.of_members(members) == JobResources(gpus=3, cpus=1 + 6 + 1, mem_gb=2 + 2 * 16 + 1)


@pytest.mark.parametrize(("launcher", "gpus_key", "cpus_key"), [
    ("ray", "ray.remote.num_gpus", "ray.remote.num_cpus"),
    ("submitit_slurm", "gpus_per_node", "cpus_per_task"),
    ("submitit_local", "gpus_per_node", "cpus_per_task"),
])
def test_launcher_configs_request_the_model_sets_resources(launcher: str, gpus_key: str, cpus_key: str) -> None:
    cfg = composed("models=qwen3-0.6b-32b", f"hydra/launcher={launcher}")
    node = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert OmegaConf.select(OmegaConf.create(node), gpus_key) == 2
    assert OmegaConf.select(OmegaConf.create(node), cpus_key) == 4
    assert node["_target_"].startswith("hydra_plugins.")


def test_joblib_runs_as_many_as_the_cores_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert composed("models=sim-r2r", "hydra/launcher=joblib").hydra.launcher.n_jobs == 8 // 3
    assert composed("models=qwen3-0.6b-32b", "hydra/launcher=joblib").hydra.launcher.n_jobs == 1  # GPU sets


def test_results_name_the_sweeper(tmp_path: Path) -> None:
    assert main(["bench", "-m", *SIM, "concurrency=1,2", f"hydra.sweep.dir={tmp_path}"]) == 0
    assert list(pd.read_csv(tmp_path / "results.csv")["sweeper"]) == ["basic", "basic"]  # a grid


def test_optuna_pareto_maximises_each_objective() -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    cfg = composed("hydra/sweeper=optuna_pareto", "objective=[accuracy,throughput_tok_s]", "seed=7")
    assert list(cfg.hydra.sweeper.direction) == ["maximize", "maximize"]
    assert cfg.hydra.sweeper.sampler._target_ == "tokenrouter.evals.optuna_samplers.ends_first_tpe"
    assert cfg.hydra.sweeper.sampler.seed == 7
    nsga = composed("hydra/sweeper=optuna_pareto", "hydra/sweeper/sampler=nsgaii", "objective=[accuracy]", "seed=7")
    assert nsga.hydra.sweeper.sampler._target_ == "optuna.samplers.NSGAIISampler"  # the plugin's own, still


def test_objective_names_and_values() -> None:
    assert objective_names("accuracy") == ["accuracy"]
    summary = {"accuracy": 0.5, "throughput_tok_s": 10, "large_token_share": None}
    assert objective_values(summary, ["accuracy", "throughput_tok_s"]) == [0.5, 10.0]
    with pytest.raises(UserError, match="has no value"):
        objective_values(summary, ["large_token_share"])
    for bad in ([], ["accuracy", "accuracy"], [1], {"a": 1}):
        with pytest.raises(UserError, match="objective"):
            objective_names(bad)


def test_objectives_are_summary_keys(tmp_path: Path) -> None:
    # every name but accuracy (graded workloads only) is in a sim run's summary, request_goodput with an SLO
    args = [*SIM, "slo.ttft_ms=1000", "objective=[throughput_tok_s,large_token_share]", f"hydra.run.dir={tmp_path}"]
    assert main(["bench", *args]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["provenance"]["command"] == ["tokenrouter", "bench", *args]  # the command, whoever ran it
    assert set(OBJECTIVES) - {"accuracy"} <= {k for k, v in summary.items() if isinstance(v, int | float)}


@pytest.mark.parametrize(("overrides", "message"), [
    (["objective=[accuracy,nope]"], "objective: unknown summary key 'nope'"),
    (["objective=3"], "objective must be a summary key"),
    (["hydra/launcher=nope"], "Could not find 'hydra/launcher/nope'"),
])
def test_bad_objective_or_launcher_is_one_line(overrides: list[str], message: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "-m", *SIM, *overrides, f"hydra.sweep.dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("summary.json"))


def test_missing_plugin_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        capsys: pytest.CaptureFixture) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "hydra_plugins.hydra_submitit_launcher" else real(name, *a))
    assert main(["bench", "-m", *SIM, "hydra/launcher=submitit_local", f"hydra.sweep.dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("needs the Hydra plugin hydra-submitit-launcher, which is not installed: "
                        "pip install 'tokenrouter[submitit]'") and "hydra/launcher=submitit_local" in err


def test_local_ray_too_small_for_one_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    assert main(["bench", "-m", *SIM, "hydra/launcher=ray", "hydra.launcher.ray.remote.num_cpus=4096",
                 f"hydra.sweep.dir={tmp_path}"]) == 2
    assert "one run asks Ray for 4096 CPUs but the local Ray cluster has" in capsys.readouterr().err


@pytest.mark.parametrize(("overrides", "message"), [
    ([], "hydra/sweeper=optuna needs the values to optimise: objective="),
    (["objective=[throughput_tok_s]"], "set hydra.sweeper.direction=[maximize]"),
])
def test_optuna_needs_a_maximised_objective(overrides: list[str], message: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    assert main(["bench", "-m", *SIM, "hydra/sweeper=optuna", *overrides, f"hydra.sweep.dir={tmp_path}"]) == 2
    assert message in capsys.readouterr().err


def test_a_failed_optuna_trial_ends_the_search_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    # r2r on the sim pair has no router: the trial fails, and past max_failure_rate (0) so does the search
    assert main(["bench", "-m", *SIM, "algorithm=r2r", "hydra/sweeper=optuna_pareto", "objective=[throughput_tok_s]",
                 "algorithm.threshold=interval(0.1,0.9)", "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "tokenrouter bench: error: algorithm r2r routes by a trained router and none is named: set "
        "algorithm.router=PATH (`tokenrouter train-router --algorithm r2r`) or the model set's routers.r2r")
    assert "Traceback" not in err


def test_slurm_array_asks_for_the_model_sets_resources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    # a stand-in SLURM whose sbatch keeps the script it was given and refuses it: the request as SLURM sees it
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\ncp "$1" {tmp_path}/sbatch.sh\necho "sbatch: error: no" >&2\nexit 1\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    sweep = tmp_path / "sweep"
    assert main(["bench", "-m", "models=qwen3-0.6b-32b", "concurrency=1,2", "hydra/launcher=submitit_slurm",
                 "hydra.launcher.partition=gpu", f"hydra.sweep.dir={sweep}"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("tokenrouter bench: the launcher failed: ")
    script = (tmp_path / "sbatch.sh").read_text()
    for line in ("--array=0-1%2", "--gpus-per-node=2", "--cpus-per-task=4", "--mem=50GB", "--partition=gpu"):
        assert f"#SBATCH {line}\n" in script


def test_slurm_without_slurm_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None)
    assert main(["bench", "-m", *SIM, "hydra/launcher=submitit_slurm", f"hydra.sweep.dir={tmp_path}"]) == 2
    assert "no SLURM here (sbatch / srun not on PATH)" in capsys.readouterr().err
