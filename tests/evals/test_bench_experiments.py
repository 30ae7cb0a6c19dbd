"""Every experiment config composes, and the threshold-validation sweep covers exactly the feasible points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenrouter.cli import main
from tokenrouter.cli.hydra_config import conf_dir

EXPERIMENTS = sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml"))


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
