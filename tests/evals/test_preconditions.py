"""The GPU node's one environment (`.[node]`, built by `make sglang-venv`) holds every package a shipped
experiment or sweep can ask for, and a job refused for a missing package names both ways to get it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from omegaconf import OmegaConf

from tokenrouter.cli.launchers import PLUGINS
from tokenrouter.evals import preconditions

REPO = Path(__file__).resolve().parents[2]


def node_extras() -> set[str]:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (spec,) = extras["node"]
    return set(re.fullmatch(r"tokenrouter\[(.*)\]", spec).group(1).split(","))


def test_the_node_extra_holds_every_package_a_job_or_sweep_can_need() -> None:
    wanted = set(preconditions.EXTRAS.values()) | {extra for _, extra in PLUGINS.values() if extra}
    assert wanted <= node_extras(), f"missing from .[node]: {sorted(wanted - node_extras())}"
    assert '".[dev,node]"' in (REPO / "Makefile").read_text()  # what `make sglang-venv` installs


def test_a_missing_package_names_its_extra_and_the_node_environment(monkeypatch) -> None:
    monkeypatch.setattr(preconditions.importlib.util, "find_spec", lambda name: None)
    cfg = OmegaConf.create({"system": {"name": "query_routing"}, "algorithm": {"name": "r2r"},
                            "models": {"name": "tiny", "members": [{"name": "small", "source": "p"}]}})
    (line,) = preconditions.missing_packages(cfg)
    assert line == ("system query_routing needs routellm, which this Python environment lacks (pip install "
                    "'.[routellm]', or make sglang-venv, the one environment for every shipped experiment, then "
                    "run from .venv-sglang)")


def test_sglang_servers_need_an_interpreter_with_sglang_not_sglang_here(monkeypatch, tmp_path: Path) -> None:
    """The SGLang servers of the baselines run from an interpreter of their own (.venv-sglang, or
    $TOKENROUTER_SGLANG_PYTHON): the benchmark's environment need not import sglang, but one such interpreter
    must exist."""
    from tokenrouter.baselines import sglang_server

    monkeypatch.setattr(preconditions.importlib.util, "find_spec", lambda name: None)  # nothing importable here
    cfg = OmegaConf.create({"system": {"name": "std_serving", "server": "sglang"}, "algorithm": {"name": "bernoulli"},
                            "models": {"name": "tiny", "members": [{"name": "small", "source": "p"}]}})
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv(sglang_server.PYTHON_ENV, str(python))
    assert preconditions.missing_packages(cfg) == []
    monkeypatch.setenv(sglang_server.PYTHON_ENV, str(tmp_path / "nope"))
    (line,) = preconditions.missing_packages(cfg)
    assert line.startswith("system std_serving (SGLang servers): $TOKENROUTER_SGLANG_PYTHON=") and "is not a file" in line
