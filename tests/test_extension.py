"""Code and configs from outside the package (tokenrouter/plugins.py): an algorithm package with its own
pyproject, entry point and config dir, pip-installed beside the project and swept by `bench -m`; a router file in
the working directory named by `module:Class`; a wheel of this project finding its configs from any directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.doc_blocks import pip_into, run_page, section, user_env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "entropy_router"
SMALL = ["models=tiny-random", "system=lockstep", "workload.num_requests=3", "workload.output_tokens=6",
         "concurrency=3"]


def pip_install(what: list[str], target: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(target), *what], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def tokenrouter(args: list[str], cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-m", "tokenrouter", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_an_installed_algorithm_package_is_swept_beside_a_builtin(tmp_path: Path) -> None:
    """docs/add_an_algorithm.md section 4, as written: the package pip-installed (into a folder on PYTHONPATH
    rather than this test's venv), swept from its own directory with its own config dir, reported with a
    built-in algorithm's sweep."""
    shutil.copytree(EXAMPLE, tmp_path / "entropy_router")  # the user's own project: this repository is untouched
    site = tmp_path / "site"

    page = section(ROOT / "docs" / "add_an_algorithm.md", "4. Sweep it next to the built-ins, on the same report")
    ran = run_page(page, tmp_path, {**user_env(), "PYTHONPATH": str(site)}, pip_into(site), timeout=600)
    assert len(ran) == 5 and "cd entropy_router" in ran
    root = tmp_path / "entropy_router" / "runs"
    table = pd.read_csv(root / "entropy" / "results.csv")
    shares = dict(zip(table["cfg.algorithm.threshold"], table["large_token_share"], strict=True))
    assert shares[100] == 0.0 and shares[0.5] > 0.0  # a random model's entropy is high: it hands off
    runs = pd.read_csv(root / "report" / "runs.csv")
    assert sorted(runs["algorithm"]) == ["bernoulli", "bernoulli", "entropy", "entropy"]


def test_a_router_file_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "my_router.py").write_text(
        (EXAMPLE / "entropy_router.py").read_text().replace('name = "entropy"', 'name = "my_entropy"'))
    done = tokenrouter(["bench", *SMALL, "algorithm.name=my_router:EntropyRouter", "~algorithm.route_prob",
                        "+algorithm.threshold=0.5",
                        f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for bad, message in (("algorithm.name=my_router:Nope", "module 'my_router' has no 'Nope'"),
                         ("algorithm.name=nowhere:X", "no module 'nowhere'"),
                         ("algorithm.name=entropyy", "unknown routing algorithm 'entropyy'; known: bernoulli, citer,"),
                         ("algorithm.name=os:getcwd", "is not a RoutingAlgorithm subclass")):
        done = tokenrouter(["bench", *SMALL, bad, f"hydra.run.dir={tmp_path / 'bad'}"], cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = tokenrouter(["bench", "--config-dir", "nope", *SMALL], cwd=tmp_path)
    assert done.returncode == 2 and "--config-dir nope: not a directory" in done.stderr


def test_a_wheel_finds_its_configs_from_any_directory(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           str(ROOT), "-w", str(wheels)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (wheel,) = wheels.glob("tokenrouter-*.whl")
    site = tmp_path / "site"
    pip_install([str(wheel)], site)
    assert (site / "tokenrouter" / "conf" / "config.yaml").is_file() and not (site / "tokenrouter" / "conf").is_symlink()
    def files(root: Path) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)

    assert files(site / "tokenrouter" / "conf") == files(ROOT / "conf")  # every config (a new group's folder too)
    # the committed local pair travels too: the quickstart's models=tiny loads it instead of training it
    assert files(site / "tokenrouter" / "models" / "tiny_pair") == files(ROOT / "models" / "tiny-pair")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = subprocess.run([sys.executable, "-c", "import tokenrouter; print(tokenrouter.__file__)"], cwd=elsewhere,
                           env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=60)
    assert probe.stdout.startswith(str(site)), probe  # the wheel's copy, not this checkout
    done = tokenrouter(["bench", "--cfg", "job", "+experiment=table3"], cwd=elsewhere, pythonpath=site)
    assert done.returncode == 0 and "experiment_name: table3" in done.stdout, done.stderr
    version = tokenrouter(["--version"], cwd=elsewhere, pythonpath=site)
    from tokenrouter import __version__

    assert version.stdout.strip() == f"tokenrouter {__version__}"
    assert (ROOT / "LICENSE").read_text().startswith(" " * 33 + "Apache License")


@pytest.mark.slow  # trains an R2R router for the local pair (~1-2 min), then 5 runs on arith
def test_the_entropy_router_on_the_pareto_plot_beside_r2r(tmp_path: Path) -> None:
    """docs/add_an_algorithm.md, section 5: the outside package swept next to a trained R2R router on a graded
    workload, both series on one Pareto plot."""
    package = tmp_path / "entropy_router"
    shutil.copytree(EXAMPLE, package)
    site = tmp_path / "site"
    pip_install([str(package)], site)
    common = ["models=tiny", "workload=arith", "workload.num_problems=16", "concurrency=8"]
    trained = tokenrouter(["train-router", "--algorithm", "r2r", "--out", str(tmp_path / "router"), "--epochs", "4",
                           "models=tiny", "workload=arith", "workload.num_problems=40"], cwd=package, pythonpath=site)
    assert trained.returncode == 0, trained.stderr[-2000:]
    runs = [["-m", "--config-dir", "conf", *common, "algorithm=entropy", "algorithm.threshold=0.05,0.5",
             "hydra.sweep.dir=runs/entropy"],
            ["-m", *common, "algorithm=r2r", f"algorithm.router={tmp_path / 'router'}", "algorithm.threshold=0.5",
             "hydra.sweep.dir=runs/r2r"],
            ["-m", *common, "system=single", "+system.model=small,large", "hydra.sweep.dir=runs/single"]]
    for argv in runs:
        done = tokenrouter(["bench", *argv], cwd=package, pythonpath=site)
        assert done.returncode == 0, done.stderr[-2000:]
    done = tokenrouter(["report", "runs", "--out", "runs/report"], cwd=package, pythonpath=site)
    assert done.returncode == 0, done.stderr[-2000:]
    points = pd.read_csv(package / "runs" / "report" / "pareto_arith.csv")
    series = set(points["series"])
    assert {"tokenrouter (entropy)", "tokenrouter (r2r)"} <= series, series


def test_serve_takes_a_user_config_dir(tmp_path: Path) -> None:
    """`serve --config-dir`: an algorithm config of the user's own (here a coin that always hands off) selected by
    name beside the shipped ones; a config dir that is not there is one line."""
    import json
    import signal
    import urllib.request

    from tokenrouter.server.ready import ready_url

    (tmp_path / "my_conf" / "algorithm").mkdir(parents=True)
    (tmp_path / "my_conf" / "algorithm" / "always_large.yaml").write_text("name: bernoulli\nroute_prob: 1.0\n")
    server = subprocess.Popen([sys.executable, "-m", "tokenrouter", "serve", "--config-dir", "my_conf",
                               "models=sim-r2r", "algorithm=always_large", "server.port=0"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        url, seen = None, []
        while url is None:
            line = server.stdout.readline()
            assert line, "".join(seen)  # the server exited before its ready line
            seen.append(line)
            url = ready_url(line.strip())
        request = urllib.request.Request(f"{url}/v1/completions", method="POST", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"model": "sim-r2r", "prompt": [5, 6, 7], "max_tokens": 4}).encode())
        with urllib.request.urlopen(request, timeout=60) as reply:
            usage = json.loads(reply.read())["usage"]
        assert usage["completion_tokens"] == 4 and usage["tokens_per_model"] == {"small": 0, "large": 4}
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(30)
    done = tokenrouter(["serve", "--config-dir", "nope", "models=sim-r2r"], cwd=tmp_path)
    assert done.returncode == 2 and "--config-dir nope: not a directory" in done.stderr
