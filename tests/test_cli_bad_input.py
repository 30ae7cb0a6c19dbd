"""Bad model and router files and config values through the real `tokenrouter bench` / `tokenrouter serve` processes:
each is one line on stderr and exit status 2 within seconds, before any subserver or model starts."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tokenrouter.algorithms.checkpoints import save_router
from tokenrouter.algorithms.routers import build_router

FAST_S = 15.0  # CLI start-up + torch import on a busy 2-core machine; a model start-up takes far longer


class _Payload:
    """Unpickling this runs code (touches a marker file): a checkpoint holding it must be refused unread."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _router_files(tmp_path: Path) -> dict[str, Path]:
    torch.manual_seed(0)
    net = build_router("r2r", {"hidden_states_size": 64, "vocab_size": 100, "hidden_dims": [32], "logits_size": 8})
    weights, _ = save_router(net, tmp_path / "ours" / "router", 0.5, {})
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short
    official = {"model_type": "HiddenStatesTokenLMHeadLogitsClassifier", "init_args": {}, "state_dict": {},
                "model_specific_args": {"extra": _Payload(tmp_path / "code-ran")}}
    torch.save(official, tmp_path / "unsafe.pt")
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, tmp_path / "whole.pt")
    (tmp_path / "truncated.pt").write_bytes((tmp_path / "whole.pt").read_bytes()[:600])
    (tmp_path / "random.pt").write_bytes(random.Random(0).randbytes(4096))
    return {"random.pt": tmp_path / "random.pt", "truncated.pt": tmp_path / "truncated.pt",
            "unsafe.pt": tmp_path / "unsafe.pt", "truncated.safetensors": weights}


def _cli(command: str, overrides: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    extra = {"bench": [f"hydra.run.dir={tmp_path / 'run'}"], "serve": ["server.port=0"],
             "rehearse": ["--out", str(tmp_path / "rehearsal")], "plan": ["--gpus", "1", "--gpu-memory-gib", "80"]}[command]
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tokenrouter", command, *overrides, *extra],
                          capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - start


def _one_line_exit_2(done: subprocess.CompletedProcess, command: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tokenrouter {command}: error: "), done.stderr
    return lines[0]


# Both commands run the same check (RoutingAlgorithm.check) before anything starts: every kind of bad file
# through `bench`, the one that must never be unpickled through `serve` too (each case is a process start).
@pytest.mark.parametrize(("name", "command"), [("random.pt", "bench"), ("truncated.pt", "bench"),
                                               ("unsafe.pt", "bench"), ("truncated.safetensors", "bench"),
                                               ("unsafe.pt", "serve")])
def test_bad_router_file_is_one_line(name: str, command: str, tmp_path: Path) -> None:
    path = _router_files(tmp_path)[name]
    done, took = _cli(command, ["models=tiny", "algorithm=r2r", f"algorithm.router={path}", "workload=arith"],
                      tmp_path)
    line = _one_line_exit_2(done, command)
    assert str(path) in line and took < FAST_S, (line, took)
    assert "weights_only" not in line and "Traceback" not in done.stdout
    if name == "unsafe.pt":
        assert "needs unpickling arbitrary Python objects" in line and "refused" in line
        assert not (tmp_path / "code-ran").exists()
    else:
        assert "not a readable" in line


@pytest.mark.parametrize("command", ["bench", "serve"])
def test_bad_seed_is_one_line(command: str, tmp_path: Path) -> None:
    done, took = _cli(command, ["models=sim-r2r", "seed=abc"], tmp_path)
    assert "seed must be an integer, got 'abc'" in _one_line_exit_2(done, command) and took < FAST_S


@pytest.mark.parametrize("command", ["bench", "serve"])
def test_a_field_of_the_wrong_type_is_one_line_before_any_process_starts(command: str, tmp_path: Path) -> None:
    # subservers decode their config with its types: the parent refuses what a child could not decode
    done, took = _cli(command, ["models=sim-r2r", "++models.members.0.kv_tokens=4096.0"], tmp_path)
    line = _one_line_exit_2(done, command)
    assert "model 'small': Expected `int`, got `float` - at `$.kv_tokens`" in line and took < FAST_S, line


@pytest.mark.parametrize("command", ["bench", "serve"])
def test_truncated_model_weights_are_one_line(command: str, tmp_path: Path) -> None:
    model = tmp_path / "small"
    shutil.copytree(Path(__file__).resolve().parents[1] / "models" / "tiny-pair" / "small", model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    done, took = _cli(command, ["models=tiny", f"models.members.0.source={model}", "algorithm=bernoulli",
                                "workload=arith"], tmp_path)
    line = _one_line_exit_2(done, command)
    assert f"model weights {weights} are not a readable safetensors file" in line and took < FAST_S, (line, took)


# A key nothing reads is refused, with the nearest known key, whether typed as Hydra would refuse it or as its
# own advice (`+key=`) would let it through; every command that composes a job answers alike.
@pytest.mark.parametrize(("command", "override", "expected"), [
    ("bench", "+concurency=16", "unknown config key 'concurency' (did you mean 'concurrency'?)"),
    ("bench", "concurency=16", "unknown config key 'concurency' (did you mean 'concurrency'?)"),
    ("bench", "+server.prot=1", "unknown config key 'server.prot' (did you mean 'server.port'?)"),
    ("serve", "+concurency=16", "unknown config key 'concurency' (did you mean 'concurrency'?)"),
    ("serve", "runtime.max_wiat_ms=3", "unknown config key 'runtime.max_wiat_ms' (did you mean 'runtime.max_wait_ms'?)"),
    ("rehearse", "+concurency=16", "unknown config key 'concurency' (did you mean 'concurrency'?)"),
    ("rehearse", "concurency=16", "unknown config key 'concurency' (did you mean 'concurrency'?)"),
    ("plan", "+concurency=16", "unknown config key 'concurency' (did you mean 'concurrency'?)"),
    ("plan", "runtime.max_wiat_ms=3", "unknown config key 'runtime.max_wiat_ms' (did you mean 'runtime.max_wait_ms'?)"),
])
def test_unknown_key_is_one_line(command: str, override: str, expected: str, tmp_path: Path) -> None:
    done, took = _cli(command, ["models=sim-r2r", override], tmp_path)
    assert expected in _one_line_exit_2(done, command) and took < FAST_S


def test_added_keys_that_are_read_pass() -> None:
    from omegaconf import OmegaConf

    from tokenrouter.cli.config_keys import check_added_keys

    cfg = OmegaConf.create({"concurrency": 4, "workload": {"name": "synthetic"}, "sampling": {"temperature": 0.5}})
    groups = {"experiment"}.__contains__
    check_added_keys(["+experiment=table3", "+sampling.temperature=0.5", "+system.model=small",
                      "+hydra.job.env_set.X=1", "+workload.my_key=1"], cfg, groups)


def test_an_algorithm_named_on_the_command_line_gets_its_own_parameters_only(tmp_path: Path) -> None:
    """`algorithm.name=X` alone used to keep the default group's parameters (bernoulli's route_prob): `unknown
    parameter(s) ['route_prob']` for any algorithm without one."""
    from tokenrouter.cli import main
    from tokenrouter.cli.config_keys import algorithm_by_name

    assert algorithm_by_name(["algorithm.name=a:B", "concurrency=2"]) == ["algorithm=stay", "algorithm.name=a:B",
                                                                          "concurrency=2"]
    assert algorithm_by_name(["algorithm=r2r", "algorithm.name=a:B"]) == ["algorithm=r2r", "algorithm.name=a:B"]
    assert algorithm_by_name(["algorithm.name=a:B", "algorithm.t=1", "~algorithm.route_prob"]) == [
        "algorithm=stay", "algorithm.name=a:B", "+algorithm.t=1"]  # its own parameters; nothing to delete
    assert main(["bench", "models=sim-r2r", "algorithm.name=stay", "runtime.thresholds=[1,1]", "workload.num_requests=2",
                 "workload.output_tokens=4", f"hydra.run.dir={tmp_path}"]) == 0


@pytest.mark.parametrize(("command", "args", "expected"), [
    ("serve", ["--port", "8001"], "unrecognized arguments: --port (tokenrouter takes Hydra overrides: "
                                  "server.port=8001)"),
    ("bench", ["--tensor-parallel-size=2"], "models.members.N.tp=2"),
    ("serve", ["models=tiny2"], "Could not find 'models/tiny2' Available options in 'models': "),
    ("bench", ["models=tiny2"], "Could not find 'models/tiny2' Available options in 'models': "),
])
def test_serve_and_bench_answer_a_mistake_alike(command: str, args: list[str], expected: str, tmp_path: Path) -> None:
    done, took = _cli(command, args, tmp_path)
    line = _one_line_exit_2(done, command)
    assert expected in line and took < FAST_S, line
    if "tiny2" in args:
        assert "sim-r2r" in line and "tiny-random" in line  # the valid names


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without the GPUs a set names")
@pytest.mark.parametrize("command", ["bench", "serve"])
def test_a_gpu_set_on_this_cpu_is_one_line_before_any_hub_call(command: str, tmp_path: Path) -> None:
    done, took = _cli(command, ["models=qwen3-0.6b-8b", "models.engine=torch", "algorithm=bernoulli"], tmp_path)
    line = _one_line_exit_2(done, command)
    assert "model 'small' is placed on cuda:0, which this machine does not have" in line and took < FAST_S, line
