"""`tokenrouter ls [KIND]`: every kind's installed names and where each comes from, an installed package's
names among them (found in its metadata, nothing imported), and a bad kind as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributions import fake_distribution
from tokenrouter.cli import main


def ls(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["ls", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_ls_lists_every_kind_with_where_it_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = ls([], capsys)
    assert status == 0
    headers = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert [h.split(" (")[0] for h in headers] == ["routing algorithms", "engines", "systems", "workload loaders"]
    assert "entry-point group tokenrouter.systems" in headers[2]
    rows = {tuple(line.split()) for line in out.splitlines() if line.startswith("  ")}
    for row in (("bernoulli", "built-in", "tokenrouter.algorithms.bernoulli:Bernoulli"),
                ("sim", "built-in", "tokenrouter.engine.sim:SimEngine"),
                ("lockstep", "built-in", "tokenrouter.baselines.lockstep:from_setup"),
                ("tokenrouter", "built-in", "tokenrouter.evals.systems:tokenrouter_system"),
                ("arith", "built-in", "tokenrouter.evals.arith:load_arith")):
        assert row in rows, out


def test_ls_one_kind_singular_or_plural_and_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    _, systems, _ = ls(["systems"], capsys)
    _, system, _ = ls(["system"], capsys)
    assert systems == system and systems.startswith("systems (") and "bernoulli" not in systems
    status, out, _ = ls(["engines", "--json"], capsys)
    assert status == 0 and {e["name"] for e in json.loads(out)} == {"torch", "sim", "sglang"}
    assert json.loads(out)[0] == {"name": "sglang", "kind": "engine", "source": "built-in",
                                  "target": "tokenrouter.engine.sglang_engine:SGLangEngine"}


def test_a_bad_kind_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = ls(["algoritms"], capsys)
    assert status == 2 and not out
    assert err == ("tokenrouter ls: error: unknown kind 'algoritms' (did you mean 'algorithms'?); known: "
                   "algorithms, engines, systems, workloads\n")


def test_ls_names_an_installed_package_and_its_version(tmp_path: Path) -> None:
    """A distribution on PYTHONPATH (as `pip install --target` leaves one) with a system and an engine: listed
    under its name and version, without importing its module (which would fail here: it does not exist)."""
    site = fake_distribution(tmp_path / "site", "my-baselines", "0.3", {
        "tokenrouter.systems": {"greedy_first": "my_baselines:GreedyFirst"},
        "tokenrouter.engines": {"my_engine": "my_baselines:MyEngine"}})
    done = subprocess.run([sys.executable, "-m", "tokenrouter", "ls"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(site)}, check=True)
    rows = [line.split(None, 1) for line in done.stdout.splitlines() if line.startswith("  ")]
    assert ["greedy_first", "entry point (my-baselines 0.3)  my_baselines:GreedyFirst"] in rows
    assert ["my_engine", "entry point (my-baselines 0.3)  my_baselines:MyEngine"] in rows
