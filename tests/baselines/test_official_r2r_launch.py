"""What the official R2R server would be launched with: command line, GPUs, config (no official code needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from baselines.official_r2r_launch import LaunchOptions, build_launch, free_port, visible_devices
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
