"""A baseline system and an engine from outside the repository (tokenrouter/registry.py): a system package with
its own pyproject, entry point and config dir, pip-installed beside the project, swept by `bench -m` next to
TokenRouter and reported with it (docs/add_a_system.md, as written); an engine package found through its entry
point in every subserver process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from tests.distributions import fake_distribution
from tests.doc_blocks import pip_into, run_page, section, user_env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "serial_system"


def test_an_installed_system_package_runs_beside_tokenrouter_and_lands_in_the_report(tmp_path: Path) -> None:
    """docs/add_a_system.md section 4: the package pip-installed (into a folder on PYTHONPATH rather than this
    test's venv), listed by `tokenrouter ls`, swept from its own directory with its own config dir next to
    TokenRouter, and reported with it."""
    shutil.copytree(EXAMPLE, tmp_path / "serial_system")  # the user's own project: this repository is untouched
    site = tmp_path / "site"

    page = section(ROOT / "docs" / "add_a_system.md", "4. Run it beside TokenRouter, on the same report")
    ran = run_page(page, tmp_path, {**user_env(), "PYTHONPATH": str(site)}, pip_into(site), timeout=600)
    assert len(ran) == 5
    listed = [line.split() for line in ran["tokenrouter ls systems"].splitlines()]
    assert ["serial", "entry", "point", "(serial-system", "0.1.0)", "serial_system:SerialSystem"] in listed
    root = tmp_path / "serial_system" / "runs"
    runs = pd.read_csv(root / "serial" / "results.csv")
    assert sorted(zip(runs["system"], runs["concurrency"], strict=True)) == [
        ("serial", 2), ("serial", 4), ("tokenrouter", 2), ("tokenrouter", 4)]
    for run_dir in runs[runs["system"] == "serial"]["run_dir"]:  # its gate held every batch to one request
        stats = json.loads((Path(run_dir) / "summary.json").read_text())["stats"]["models"]
        assert {m["mean_batch_size"] for m in stats.values()} == {1.0}, stats
    curves = pd.read_csv(root / "report" / "concurrency.csv")
    assert set(curves["series"]) == {"serial", "tokenrouter (bernoulli)"}
    assert "serial" in (root / "report" / "report.html").read_text()


ENGINE = '''"""The torch engine, noting which process built which model: an engine of one's own in a few lines."""

import os

from tokenrouter.engine.torch_engine import TorchEngine


class NotedEngine(TorchEngine):
    @classmethod
    def from_spec(cls, spec, tp=1):
        engine = super().from_spec(spec, tp)
        with open(os.path.join(os.environ["NOTED_ENGINE_DIR"], f"{spec.name}-{os.getpid()}"), "w") as out:
            out.write(type(engine).__name__)
        return engine
'''


def test_an_engine_from_an_entry_point_is_built_in_every_subserver(tmp_path: Path) -> None:
    """An engine package on PYTHONPATH (its dist-info declares the entry point): `ls` lists it, and a
    TokenRouter run whose two models name it builds it in each model's own subserver process."""
    site = fake_distribution(tmp_path / "site", "noted-engine", "0.2",
                             {"tokenrouter.engines": {"noted": "noted_engine:NotedEngine"}},
                             {"noted_engine.py": ENGINE})
    notes = tmp_path / "notes"
    notes.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "NOTED_ENGINE_DIR": str(notes)}
    listed = subprocess.run([sys.executable, "-m", "tokenrouter", "ls", "engines"], env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    assert "  noted   entry point (noted-engine 0.2)  noted_engine:NotedEngine" in listed.stdout.splitlines()
    done = subprocess.run([sys.executable, "-m", "tokenrouter", "bench", "models=tiny-random", "system=tokenrouter",
                           "models.members.0.engine=noted", "models.members.1.engine=noted",
                           "algorithm.route_prob=0.5", "workload.num_requests=3", "workload.output_tokens=6",
                           "concurrency=3", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    built = sorted(p.name.split("-")[0] for p in notes.iterdir())
    pids = {p.name.split("-")[1] for p in notes.iterdir()}
    assert built == ["large", "small"] and len(pids) == 2, built  # one subserver process per model
    assert {p.read_text() for p in notes.iterdir()} == {"NotedEngine"}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["num_requests"] == 3 and summary["errors"] == 0
    assert [m["engine"] for m in summary["config"]["models"]["members"]] == ["noted", "noted"]
    bad = subprocess.run([sys.executable, "-m", "tokenrouter", "bench", "models=tiny-random",
                          "models.members.0.engine=notd", f"hydra.run.dir={tmp_path / 'bad'}"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "model 'small': unknown engine 'notd' (did you mean 'noted'?); known: sglang, sim, torch, noted;" \
        in bad.stderr, bad.stderr
