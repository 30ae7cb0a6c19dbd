"""What the official R2R server would be launched with: command line, GPUs, config (no official code needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tokenrouter.baselines.official_r2r_launch import LaunchOptions, build_launch, free_port, visible_devices
from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError

OFFICIAL = {"quick": {"model_path": "Qwen/Qwen3-0.6B"},
            "router": {"router_path": "nics-efc/R2R_router", "override_init_args": {"pretrained_model_name": "x"}}}


def _pair(small: str = "cuda:0", large: str = "cuda:0") -> tuple[ModelSpec, ModelSpec]:
    return (ModelSpec(name="small", source="Qwen/Qwen3-0.6B", device=small),
            ModelSpec(name="large", source="Qwen/Qwen3-32B", device=large, tp=2))


def _opts(**kw) -> LaunchOptions:
    return LaunchOptions(**{"python": "/r2r/.venv/bin/python", "config_path": Path("/tmp/x/config.json"), "port": 4321,
                            "threshold": 0.406, "router": "/cache/default_router.pt", **kw})


def test_default_launch_overlaps_tp_on_the_paper_gpus_with_our_router_and_threshold() -> None:
    launch = build_launch(_opts(), OFFICIAL, *_pair())
    assert launch.cmd == ["/r2r/.venv/bin/python", "script/inference/launch_r2r_server.py", "--config-path",
                          "/tmp/x/config.json", "--host", "127.0.0.1", "--port", "4321", "--threshold", "0.406",
                          "--tp-size-quick", "1", "--tp-size-ref", "2", "--overlap-tp-schedule"]
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "0,1"}  # small on GPU 0, large on GPUs 0-1, shared
    assert launch.config["router"] == {"router_path": "/cache/default_router.pt", "threshold": 0.406,
                                       "override_init_args": {"pretrained_model_name": "x"}}
    assert OFFICIAL["router"]["router_path"] == "nics-efc/R2R_router"  # the official config is not modified
    assert launch.config_path == Path("/tmp/x/config.json")


def test_visible_devices_follow_the_model_set() -> None:
    small, large = _pair("cuda:2", "cuda:2")
    assert visible_devices(small, large, 1, 2, overlap=True) == "2,3"
    assert visible_devices(small, large, 1, 2, overlap=True, parent="4,5,6,7") == "6,7"  # our cuda:K in our view
    small, large = _pair("cuda:0", "cuda:1")
    assert visible_devices(small, large, 1, 2, overlap=False) == "0,1,2"  # official: small's GPUs, then large's
    launch = build_launch(_opts(overlap_tp_schedule=False), OFFICIAL, small, large)
    assert "--overlap-tp-schedule" not in launch.cmd and launch.env["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    with pytest.raises(UserError, match="same first GPUs"):
        visible_devices(small, large, 1, 2, overlap=True)
    with pytest.raises(UserError, match="needs separate GPUs"):
        visible_devices(*_pair(), 1, 2, overlap=False)
    with pytest.raises(UserError, match="GPUs only: model 'small' has device 'cpu'"):
        visible_devices(*_pair("cpu"), 1, 2, overlap=True)
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES=3 shows 1"):
        visible_devices(*_pair(), 1, 2, overlap=True, parent="3")


def test_free_port_can_be_bound_again() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _cpu_pair(**large) -> tuple[ModelSpec, ModelSpec]:
    return (ModelSpec(name="small", source="tiny:small", threads=1, kv_tokens=4096),
            ModelSpec(name="large", source="tiny:large", **{"threads": 1, "kv_tokens": 8192, **large}))


def test_cpu_pair_runs_with_our_adaptations_on_its_path_and_no_gpus() -> None:
    launch = build_launch(_opts(local_models=True, tp_large=1), OFFICIAL, *_cpu_pair())
    assert "--overlap-tp-schedule" not in launch.cmd  # no GPU memory to split
    env = launch.env
    assert Path(env["PYTHONPATH"]).name == "official_r2r_cpu" and (Path(env["PYTHONPATH"]) / "sitecustomize.py").is_file()
    assert env["TOKENROUTER_R2R_CPU"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["TOKENROUTER_R2R_DTYPE"] == "float32" and env["TOKENROUTER_R2R_KV_TOKENS"] == "8192"
    assert env["OMP_NUM_THREADS"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in build_launch(_opts(tp_large=1), OFFICIAL, *_cpu_pair()).env  # Hub models


@pytest.mark.parametrize(("large", "tp_large", "message"), [
    ({"device": "cuda:0"}, 1, "both models on GPUs or both on CPU"),
    ({"dtype": "bfloat16"}, 1, "one dtype"),
    ({"threads": 2}, 1, "one threads"),
    ({}, 2, "tp 1"),
])
def test_cpu_pairs_the_official_server_cannot_run_are_one_line(large: dict, tp_large: int, message: str) -> None:
    with pytest.raises(UserError, match=message) as err:
        build_launch(_opts(tp_large=tp_large), OFFICIAL, *_cpu_pair(**large))
    assert "\n" not in str(err.value)
