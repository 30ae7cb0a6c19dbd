"""The same CPU sweep (sim pair, in-process lock-step system) through Hydra's launchers: a real local Ray
cluster (hydra/launcher=ray, `ray.init()` in the command's process), submitit's local executor and joblib
give the same results.csv but for timings; a Ray worker killed mid-run is redone; a rerun after a run lost its
summary redoes only that run; a run dir held by another process is refused to a Ray worker (the flock holds
across processes); Optuna searches a sim threshold to completion and resumes from the run dirs. Slow: every
launcher starts processes (Ray ~10 s to start)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tokenrouter.cli import main
from tokenrouter.fsutil import LOCK_FILE, locked_dir

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
# 6 requests of 40 tokens: ~1-4 s a run, long enough to kill one mid-run
POINTS = ["models=sim-r2r", "system=lockstep", "workload.num_requests=6", "workload.output_tokens=40",
          "concurrency=1,2,4"]
RAY = ["hydra/launcher=ray", "hydra.launcher.ray.remote.num_cpus=1"]  # 2 cores: a run's 3 CPUs would never fit
# what depends on wall-clock time (and the run dir's absolute path, the date, the commit): not compared
TIMED = re.compile(r"run_dir|elapsed|duration|latency|throughput|ttft|tpot|itl|e2el|in_flight|provenance\."
                   r"|stats\.models\.\w+\.(steps|mean_batch_size)")


def deterministic(sweep: Path) -> pd.DataFrame:
    """results.csv without its timing columns, rows in point order, run dirs relative to the sweep."""
    table = pd.read_csv(sweep / "results.csv")
    points = [str(Path(d).relative_to(sweep)) for d in table["run_dir"]]
    table = table[[c for c in table.columns if not TIMED.search(c)]].assign(point=points)
    return table.sort_values("point").reset_index(drop=True)


def bench_process(sweep: Path, *overrides: str) -> subprocess.Popen:
    """`tokenrouter bench -m` in its own process (and session): the Ray cluster it starts ends with it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tokenrouter", "bench", "-m", *POINTS, *overrides,
                             f"hydra.sweep.dir={sweep}"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def kill_a_running_worker(sweep: Path, proc: subprocess.Popen, timeout: float = 120) -> tuple[Path, int]:
    """SIGKILL the worker process of the first run seen mid-run (requests recorded, no summary yet): the
    pid its run dir's lock file names."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for run in sorted(sweep.glob("[0-9]")):
            lines = (run / "requests.jsonl").read_text().count("\n") if (run / "requests.jsonl").exists() else 0
            pid = (run / LOCK_FILE).read_text().strip() if (run / LOCK_FILE).exists() else ""
            if lines and pid.isdigit() and not (run / "summary.json").exists():
                os.kill(int(pid), signal.SIGKILL)
                return run, int(pid)
        time.sleep(0.02)
    raise AssertionError(f"no run was seen mid-run: {finish(proc)[1][-2000:]}")


@pytest.fixture(scope="module")
def joblib_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sweep = tmp_path_factory.mktemp("joblib")
    assert main(["bench", "-m", *POINTS, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                 f"hydra.sweep.dir={sweep}"]) == 0
    return sweep


def test_ray_redoes_a_killed_worker_resumes_and_matches_joblib(tmp_path: Path, joblib_sweep: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    proc = bench_process(tmp_path, *RAY)
    killed_run, killed_pid = kill_a_running_worker(tmp_path, proc)
    rc, out = finish(proc)
    assert rc == 0, out[-3000:]
    assert "Started a local Ray instance" in out
    # Ray retried the killed task in a new worker, which took the run dir (the kernel dropped the dead one's
    # flock) and ran it again from scratch: every request once, a summary, another pid on the lock
    rows = [json.loads(line) for line in (killed_run / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(6))
    assert int((killed_run / LOCK_FILE).read_text()) != killed_pid
    summary = json.loads((killed_run / "summary.json").read_text())
    assert summary["provenance"]["command"][:2] == ["tokenrouter", "bench"]  # the user's, not the worker's
    first = deterministic(tmp_path)
    pd.testing.assert_frame_equal(first, deterministic(joblib_sweep))

    # a run that lost its summary (killed with the whole sweep): a rerun redoes it and skips the others
    lost = tmp_path / "1"
    (lost / "summary.json").unlink()
    kept = {p: p.stat().st_mtime_ns for p in tmp_path.glob("[02]/summary.json")}
    with locked_dir(lost):  # ...but not while another process holds its run dir
        rc, out = finish(bench_process(tmp_path, *RAY))
    assert rc == 2 and f"run directory {lost} is in use by another run (pid {os.getpid()})" in out, out[-3000:]
    assert not (lost / "summary.json").exists()
    rc, out = finish(bench_process(tmp_path, *RAY))
    assert rc == 0, out[-3000:]
    assert (lost / "summary.json").exists()
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    pd.testing.assert_frame_equal(deterministic(tmp_path), first)


def test_submitit_local_matches_joblib(tmp_path: Path, joblib_sweep: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    assert main(["bench", "-m", *POINTS, "hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=1",
                 f"hydra.sweep.dir={tmp_path}"]) == 0
    assert list((tmp_path / ".submitit").iterdir())  # the jobs went through submitit
    pd.testing.assert_frame_equal(deterministic(tmp_path), deterministic(joblib_sweep))


def test_optuna_searches_a_threshold_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = ["bench", "-m", "models=sim-r2r", "system=lockstep", "workload.num_requests=6",
             "workload.output_tokens=12", "hydra/sweeper=optuna_pareto",
             "objective=[throughput_tok_s,large_token_share]", "algorithm.route_prob=interval(0.05,0.95)",
             "hydra.sweeper.n_trials=6", "hydra.sweeper.sampler.n_startup_trials=3",
             f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=${hydra.job.override_dirname}"]
    assert main(sweep) == 0
    table = pd.read_csv(tmp_path / "results.csv")
    assert len(table) == 6 and table["cfg.algorithm.route_prob"].between(0.05, 0.95).all()
    assert set(table["sweeper"]) == {"optuna_pareto"}  # the report draws its frontier apart from a grid's
    front = (tmp_path / "optimization_results.yaml").read_text()
    assert "solutions:" in front and "algorithm.route_prob" in front
    # the seeded sampler proposes the same trials again, and each comes back from its summary.json
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/summary.json")}
    capsys.readouterr()
    assert main(sweep) == 0
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/summary.json")} == mtimes
    assert (tmp_path / "optimization_results.yaml").read_text() == front
