"""A real SGLang server (`python -m sglang.launch_server`) per model, for the baselines that the paper ran on
SGLang: Std. Serving, query-level routing, single models.

Why a separate interpreter: SGLang pins its own torch and transformers, so it lives in its own venv
(`make sglang-venv`); the benchmark runs in ours and only talks HTTP to it. Why these CPU flags: SGLang's
scheduler polls its sockets in a busy loop, which on a 2-core machine takes a core per idle server
(`--sleep-on-idle` stops that); its default KV pool on CPU is sized from free host memory (31 M tokens,
18 GB and 34 s here), so the pool is the model's `kv_tokens`; `--enable-metrics` gives the per-stage
scheduler times that the Table-10 breakdown reads (`scheduler_stages`).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tokenrouter.config import ModelSpec
from tokenrouter.engine.loader import refuse_sglang_tp_on_cpu
from tokenrouter.engine.sglang_args import rank_placement, server_env, server_kv_flags
from tokenrouter.engine.sglang_engine import CPU_SHIM, SGLANG_VERSION
from tokenrouter.errors import UserError

_ROOT = Path(__file__).resolve().parents[2]
PYTHON_ENV = "TOKENROUTER_SGLANG_PYTHON"


@dataclass
class SGLangServerOptions:
    """How to start SGLang servers (the `system.sglang` block of the baselines that use them)."""

    python: str = "auto"  # auto: $TOKENROUTER_SGLANG_PYTHON, else .venv-sglang/bin/python, else this interpreter
    args: list[str] = field(default_factory=list)  # extra `sglang.launch_server` arguments
    startup_timeout_s: float = 300.0

    @classmethod
    def from_dict(cls, raw: object, where: str) -> SGLangServerOptions:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise UserError(f"{where}: sglang must be a mapping of python / args / startup_timeout_s")
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise UserError(f"{where}: unknown sglang option(s) {sorted(unknown)}")
        opts = cls(**raw)
        if not isinstance(opts.args, list) or not all(isinstance(a, str) for a in opts.args):
            raise UserError(f"{where}: sglang.args must be a list of strings")
        if opts.startup_timeout_s <= 0:
            raise UserError(f"{where}: sglang.startup_timeout_s must be > 0")
        return opts


def sglang_python(choice: str = "auto") -> str:
    """The interpreter that has SGLang, or one line saying how to get one."""
    if choice != "auto":
        if not Path(choice).is_file():
            raise UserError(f"sglang.python {choice!r} is not a file")
        return choice
    env = os.environ.get(PYTHON_ENV)
    if env:
        if not Path(env).is_file():
            raise UserError(f"${PYTHON_ENV}={env!r} is not a file")
        return env
    venv = _ROOT / ".venv-sglang" / "bin" / "python"
    if venv.is_file():
        return str(venv)
    import importlib.util

    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    raise UserError(f"SGLang servers need an interpreter with sglang=={SGLANG_VERSION}: run `make sglang-venv`, "
                    f"or set ${PYTHON_ENV} / sglang.python")


def sglang_command(spec: ModelSpec, model_path: str, port: int, seed: int, hidden_states: bool,
                   opts: SGLangServerOptions) -> tuple[list[str], dict[str, str]]:
    """The launch command and environment of one SGLang server for `spec`."""
    if spec.engine == "sim":
        raise UserError(f"model {spec.name!r} is a sim engine; an SGLang server serves real weights only")
    on_cpu = spec.device == "cpu"
    refuse_sglang_tp_on_cpu(spec)
    cmd = [sglang_python(opts.python), "-m", "sglang.launch_server", "--model-path", model_path,
           "--host", "127.0.0.1", "--port", str(port), "--tp-size", str(spec.tp), "--dtype", spec.dtype,
           "--random-seed", str(seed), "--enable-metrics", "--sleep-on-idle", "--log-level", "warning"]
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    env.pop("PYTHONPATH", None)  # our venv's path must not leak into SGLang's
    if on_cpu:
        cmd += ["--device", "cpu", "--attention-backend", "torch_native"]
        env["PYTHONPATH"] = str(CPU_SHIM)  # SGLang's CPU rotary path imports vllm._custom_ops (never called)
        if spec.threads:
            env["OMP_NUM_THREADS"] = str(spec.threads)
    else:  # its ranks on consecutive GPUs from the model's own (cuda:K -> K..K+tp-1), as our engines place them
        cmd += ["--base-gpu-id", str(rank_placement(spec, 0).base_gpu_id)]
        if not spec.cuda_graph:
            cmd += ["--disable-cuda-graph"]
    cmd += server_kv_flags(spec)  # a fraction alone, or the planned tokens: never both (SGLang takes the minimum)
    env.update(server_env(spec))
    if hidden_states:
        cmd += ["--enable-return-hidden-states"]
    return cmd + list(opts.args), env


_SAMPLE = re.compile(r'^(sglang:[a-z0-9_]+)\{([^}]*)\} (\S+)$', re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def scheduler_stages(metrics_text: str) -> dict[str, float]:
    """SGLang's own split of its scheduler loop, from /metrics: seconds per stage (`stage_<category>`: recv,
    process_input_requests, get_next_batch_to_run = prefix match + KV allocation, run_batch = the forward,
    process_batch_result = radix insert / release / output, idle, ...), forward passes (`forward_passes`), and
    the tokenizer manager's request latency sum and count (`e2e_s`, `requests`)."""
    out: dict[str, float] = {"forward_passes": 0.0, "e2e_s": 0.0, "requests": 0.0}
    for name, labels, value in _SAMPLE.findall(metrics_text):
        tags = dict(_LABEL.findall(labels))
        v = float(value)
        if name == "sglang:scheduler_stage_seconds_total":
            key = f"stage_{tags.get('category', 'other')}"
            out[key] = out.get(key, 0.0) + v
        elif name == "sglang:cuda_graph_passes_total":  # every forward pass, by mode (graph or not)
            out["forward_passes"] += v
        elif name == "sglang:e2e_request_latency_seconds_sum":
            out["e2e_s"] += v
        elif name == "sglang:e2e_request_latency_seconds_count":
            out["requests"] += v
    return out
