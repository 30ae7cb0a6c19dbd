"""How the official R2R server is launched: command line, environment and config, built by pure functions.

Why separate: everything that decides what the official code runs with (GPUs, port, router, threshold,
`--overlap-tp-schedule`) is testable without the official code or a GPU; `official_r2r` only starts it.
Read from thu-nics/R2R at commit 14994a0: `script/inference/launch_r2r_server.py` (flags) and
`r2r/models/sglang_patch/sl_disaggregation_system.py` (GPU use: the small model's ranks on visible GPUs
0..tp_small-1; the large model's on the next tp_large GPUs, or, with `--overlap-tp-schedule`, on GPUs
0..tp_large-1 too, memory split between the two models sharing them).

On CPU (both models' device `cpu`) the same server runs with our adaptations loaded into its processes
(`official_r2r_cpu/`, first on its PYTHONPATH: its sitecustomize installs import hooks; R2R's files are
untouched): no GPUs, the models' dtype, KV pool and threads, Hub offline when the models are local.
"""

from __future__ import annotations

import copy
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError

CPU_SHIM = Path(__file__).with_name("official_r2r_cpu")
SERVER_SCRIPT = "script/inference/launch_r2r_server.py"
# What that script serves. It has no lock-step mode: the lock-step engine the paper calls "official R2R" is
# DynamicSimpleSGLangSelector (r2r/models/dynamic_sglang_selector.py, driven by script/playground/speed_benchmark.py).
SERVER = "SLDisaggregationSystem (asynchronous; script/inference/launch_r2r_server.py)"


@dataclass(frozen=True)
class LaunchOptions:
    """What the official server is started with (system.* options, resolved)."""

    python: str
    config_path: Path  # the private config file the command points at
    port: int
    threshold: float
    router: str  # local checkpoint file, written into the config as router.router_path
    tp_small: int = 1
    tp_large: int = 2
    overlap_tp_schedule: bool = True
    local_models: bool = False  # every model (and the router) is a local path: the Hub is not asked


@dataclass(frozen=True)
class Launch:
    """The server's command line, the environment variables set on top of ours, and its config file."""

    cmd: list[str]
    env: dict[str, str]
    config: dict[str, Any]
    config_path: Path


def gpu_ids(model: ModelSpec, tp: int) -> list[int]:
    """The GPUs a model's `tp` ranks use in our placement: cuda:K .. K+tp-1."""
    device = model.device.strip()
    if device != "cuda" and not device.startswith("cuda:"):
        raise UserError(f"official_r2r runs on GPUs only: model {model.name!r} has device {model.device!r}")
    first = int(device.split(":", 1)[1]) if ":" in device else 0
    return list(range(first, first + tp))


def visible_devices(small: ModelSpec, large: ModelSpec, tp_small: int, tp_large: int, overlap: bool,
                    parent: str | None = None) -> str:
    """CUDA_VISIBLE_DEVICES that make the official placement match the model set's: with overlap both models
    start at the first visible GPU (so they must share their first GPU); without, small's GPUs then large's.
    `parent`: our own CUDA_VISIBLE_DEVICES, which our cuda:K indices refer to."""
    s, big = gpu_ids(small, tp_small), gpu_ids(large, tp_large)
    if overlap:
        longer, shorter = (big, s) if len(big) >= len(s) else (s, big)
        if longer[: len(shorter)] != shorter:
            raise UserError(
                f"official_r2r with overlap_tp_schedule puts both models on the same first GPUs; the model set "
                f"has small on {s} and large on {big} (set system.overlap_tp_schedule=false or the models' device)"
            )
        ids = longer
    elif set(s) & set(big):
        raise UserError(f"official_r2r without overlap_tp_schedule needs separate GPUs: small on {s}, large on {big}")
    else:
        ids = s + big
    names = [p.strip() for p in (parent or "").split(",") if p.strip()] or [str(i) for i in range(max(ids) + 1)]
    if max(ids) >= len(names):
        raise UserError(f"official_r2r: GPUs {ids} asked for, CUDA_VISIBLE_DEVICES={parent} shows {len(names)}")
    return ",".join(names[i] for i in ids)


def on_cpu(small: ModelSpec, large: ModelSpec) -> bool:
    """Whether the pair runs on CPU (both members); a pair split between CPU and GPU is refused."""
    cpu = [m.device.strip() == "cpu" for m in (small, large)]
    if cpu[0] != cpu[1]:
        raise UserError(f"official_r2r runs both models on GPUs or both on CPU: small on {small.device!r}, "
                        f"large on {large.device!r}")
    return cpu[0]


def cpu_env(small: ModelSpec, large: ModelSpec, local_models: bool) -> dict[str, str]:
    """The server's environment on CPU: our adaptations first on its path, the pair's dtype, KV pool and threads
    (one setting for both: the official server builds both models alike)."""
    for key in ("dtype", "threads"):
        if getattr(small, key) != getattr(large, key):
            raise UserError(f"official_r2r on CPU runs both models with one {key}: small has "
                            f"{getattr(small, key)!r}, large {getattr(large, key)!r}")
    env = {"TOKENROUTER_R2R_CPU": "1", "PYTHONPATH": str(CPU_SHIM), "CUDA_VISIBLE_DEVICES": "",
           "TOKENROUTER_R2R_DTYPE": small.dtype, "TOKENROUTER_R2R_KV_TOKENS": str(max(small.kv_tokens, large.kv_tokens)),
           "OMP_NUM_THREADS": str(small.threads)}
    if local_models:
        env["HF_HUB_OFFLINE"] = "1"  # the router's loader asks the Hub first for any path; nothing to ask for
    return env


def server_config(official: dict[str, Any], router: str, threshold: float) -> dict[str, Any]:
    """Its config with our router and threshold written in: its server lets `router.threshold` in the file
    override the CLI flag, and `router.router_path` would otherwise be resolved again by its own code."""
    cfg = copy.deepcopy(official)
    cfg.setdefault("router", {}).update(router_path=router, threshold=threshold)
    return cfg


def build_launch(opts: LaunchOptions, official: dict[str, Any], small: ModelSpec, large: ModelSpec,
                 parent_visible: str | None = None) -> Launch:
    """Command line, environment and config for one official R2R server (`parent_visible`: our own
    CUDA_VISIBLE_DEVICES, if set)."""
    cmd = [opts.python, SERVER_SCRIPT, "--config-path", str(opts.config_path), "--host", "127.0.0.1",
           "--port", str(opts.port), "--threshold", str(opts.threshold),
           "--tp-size-quick", str(opts.tp_small), "--tp-size-ref", str(opts.tp_large)]
    config = server_config(official, opts.router, opts.threshold)
    if on_cpu(small, large):
        if max(opts.tp_small, opts.tp_large) > 1:
            raise UserError("official_r2r on CPU runs each model in one process (tp 1): set both models' tp to 1")
        return Launch(cmd, cpu_env(small, large, opts.local_models), config, opts.config_path)
    if opts.overlap_tp_schedule:
        cmd.append("--overlap-tp-schedule")
    devices = visible_devices(small, large, opts.tp_small, opts.tp_large, opts.overlap_tp_schedule, parent_visible)
    return Launch(cmd, {"CUDA_VISIBLE_DEVICES": devices}, config, opts.config_path)


def free_port() -> int:
    """A port free now on 127.0.0.1 (bound to 0, then released for the server to take)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
