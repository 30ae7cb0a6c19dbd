"""What the wheel installs: one top-level import name, `tokenrouter`. `evals` and `baselines` are the import
names of other distributions on the index (OpenAI's evals and baselines); the harness and the baselines are
`tokenrouter.evals` and `tokenrouter.baselines`, so installing either beside this project overwrites nothing
and shadows nothing.

The wheel is built from a clean copy of the sources (an in-tree `build/` can hold files of an older layout,
which setuptools would put in the wheel), installed into a folder, and `python -m tokenrouter bench` run from
it with packages named `evals` and `baselines` that break on import first on PYTHONPATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "tokenrouter", "conf", "models/tiny-pair")
SHADOWS = {  # what another distribution of the same names might hold: importing any of it fails loudly
    "evals/__init__.py": "raise ImportError('another distribution named evals was imported')\n",
    "baselines/__init__.py": "JUNK = 'another distribution named baselines'\n",
    "baselines/lockstep.py": "raise ImportError('another distribution named baselines was imported')\n",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for rel in SOURCES:
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, src / rel, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(ROOT / rel, src / rel)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("tokenrouter-*.whl")
    return path


def test_the_wheel_installs_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and tops - dist_info == {"tokenrouter"}, sorted(tops)
    assert (zipfile.Path(wheel, next(iter(dist_info)) + "/top_level.txt").read_text().split()
            == ["tokenrouter"])
    # the harness, the baselines and the official R2R CPU adaptations (package data) travel under tokenrouter/
    for rel in ("evals/bench.py", "evals/systems.py", "baselines/lockstep.py", "baselines/official_r2r_launch.py",
                "baselines/official_r2r_cpu/sitecustomize.py", "baselines/official_r2r_cpu/README.md",
                "baselines/official_r2r_cpu/vllm/model_executor/layers/activation.py", "conf/config.yaml"):
        assert f"tokenrouter/{rel}" in names, rel


def test_bench_runs_with_other_evals_and_baselines_first_on_the_path(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shadow = tmp_path / "shadow"
    for rel, text in SHADOWS.items():
        (shadow / rel).parent.mkdir(parents=True, exist_ok=True)
        (shadow / rel).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(site)])}
    where = subprocess.run([sys.executable, "-c", "import tokenrouter, baselines; print(tokenrouter.__file__); "
                            "print(baselines.JUNK)"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=60)
    assert where.returncode == 0, where.stderr
    assert where.stdout.splitlines() == [str(site / "tokenrouter" / "__init__.py"),
                                         "another distribution named baselines"]  # the wheel's, beside the junk
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "tokenrouter", "bench", "models=sim-r2r", "system=lockstep",
                           "workload.num_requests=4", "workload.output_tokens=8", "concurrency=2",
                           f"hydra.run.dir={run}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["num_requests"] == 4, summary
    listed = subprocess.run([sys.executable, "-m", "tokenrouter", "ls", "systems"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "tokenrouter.baselines.lockstep:from_setup" in listed.stdout, listed
