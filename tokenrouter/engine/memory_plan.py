"""Joint GPU memory plan for the models of a set, made before any of them loads.

Why: sizing each KV pool from the memory free when its own process starts depends on which sharing model
loaded first (they start concurrently), and a model set that cannot fit should fail in a second with one
line, not after minutes of loading with a CUDA out-of-memory traceback. Here `mem_fraction` is the fraction
of the device's TOTAL memory that this model's process may use on it (per TP rank, on each of its devices):
its weights, its KV, and an explicit reserve for what is neither (`reserve_bytes`: the CUDA context, cuBLAS
and NCCL buffers, activations, CUDA graphs; for the torch engine also the decode-time gather of one layer's
K/V, which grows with the pool). The plan turns it into an absolute KV size per model (torch: `kv_bytes`;
sglang: `kv_tokens`, passed as max_total_tokens: engine/sglang_args.py), from the weights' size (safetensors
headers), the KV bytes per token (the config) and the device's total memory; never from the memory free when
a process starts, which depends on which sharing model started first.
"""

from __future__ import annotations

import json
import math
import struct
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError

GIB = 2**30
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Demand:
    """What one model asks of each device it runs on (a TP rank's share: weights / tp, KV heads / tp)."""

    name: str
    devices: tuple[str, ...]
    weights_bytes: int  # per device
    kv_bytes_per_token: int  # per device
    mem_fraction: float | None  # of the device's total memory, weights + KV + reserve; None: a fixed KV size
    kv_bytes: int = 0  # the fixed KV size per device when mem_fraction is None
    reserve_bytes: int = 0  # per device, neither weights nor KV (reserve_bytes())
    kv_overhead: float = 0.0  # transient bytes per KV byte (the torch engine's per-layer gather: 1 / layers)


# Per process and device: CUDA context (~0.5 GiB), cuBLAS workspaces, the caching allocator's fragmentation,
# NCCL buffers for TP groups. Activations on top: a prefill chunk of max_step_tokens through the MLP of a
# 32B model is ~0.4 GiB per tensor; SGLang's decode CUDA graphs keep their own pool.
CONTEXT_RESERVE = 1 * GIB
# sglang: activations and its request table, (MAX_RUNNING_REQUESTS + 1) x (context + 4) int32 (0.25 GiB at 128k)
ACTIVATION_RESERVE = {"torch": 1 * GIB, "sglang": 2 * GIB + GIB // 4}
NCCL_RESERVE = GIB // 2  # tp > 1


def reserve_bytes(engine: str, tp: int) -> int:
    """What one process of `engine` needs on a device beyond its weights and KV pool."""
    return CONTEXT_RESERVE + ACTIVATION_RESERVE.get(engine, GIB) + (NCCL_RESERVE if tp > 1 else 0)


def plan_memory(demands: list[Demand], totals: dict[str, int]) -> dict[str, int]:
    """KV bytes per device for each model with a mem_fraction; raises one UserError line if the set cannot fit."""
    per_device: dict[str, list[Demand]] = defaultdict(list)
    for d in demands:
        for dev in d.devices:
            if dev not in totals:
                raise UserError(f"model {d.name!r} is placed on {dev}, which this machine does not have "
                                f"(devices: {', '.join(sorted(totals)) or 'none'})")
            per_device[dev].append(d)
    kv: dict[str, int] = {}
    for dev, here in per_device.items():
        total = totals[dev]
        fractions = sum(d.mem_fraction for d in here if d.mem_fraction is not None)
        fixed = sum(d.weights_bytes + d.kv_bytes * (1 + d.kv_overhead) + d.reserve_bytes
                    for d in here if d.mem_fraction is None)
        if fractions > 1 or fixed + fractions * total > total:
            names = ", ".join(repr(d.name) for d in here)
            raise UserError(f"models {names} do not fit {dev} ({total / GIB:.1f} GiB): their mem_fractions sum to "
                            f"{fractions:.2f} and fixed-size models need {fixed / GIB:.1f} GiB; lower mem_fraction "
                            f"or move a model to another device (models.members.N.device=cuda:K)")
        for d in here:
            if d.mem_fraction is None:
                continue
            room = int((int(d.mem_fraction * total) - d.weights_bytes - d.reserve_bytes) / (1 + d.kv_overhead))
            if room < d.kv_bytes_per_token:
                raise UserError(f"model {d.name!r} does not fit {dev}: {d.weights_bytes / GIB:.1f} GiB of weights "
                                f"and a {d.reserve_bytes / GIB:.1f} GiB reserve exceed its mem_fraction "
                                f"{d.mem_fraction:g} of {total / GIB:.1f} GiB; give it its own device "
                                f"(models.members.N.device=cuda:K), tp > 1, or a larger mem_fraction")
            kv[d.name] = min(kv.get(d.name, room), room)
    return kv


def weights_numel(model_dir: str | Path, gguf_file: str | None = None) -> int:
    """Parameters of a model, from its safetensors (or GGUF) headers alone (no tensor is read)."""
    if gguf_file is not None:
        from gguf import GGUFReader

        return sum(int(t.n_elements) for t in GGUFReader(Path(model_dir) / gguf_file).tensors)
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise UserError(f"model directory {model_dir} has no safetensors files to size its weights from")
    numel = 0
    for path in files:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        numel += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return numel


def kv_bytes_per_token(config: object, dtype: str, tp: int = 1) -> int:
    """K and V of one token over all layers, on one TP rank (its share of the KV heads)."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return 2 * int(config.num_hidden_layers) * (kv_heads // tp) * head_dim * _ITEMSIZE[dtype]


@dataclass(frozen=True)
class Size:
    """What a plan needs of a checkpoint: its parameters and its config (or a stand-in with the same attention
    fields, from the model set's footprint)."""

    numel: int
    config: object  # num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim (kv_bytes_per_token)
    measured: bool  # from the files on disk (else from the model set's recorded footprint)


def model_size(spec: ModelSpec) -> Size:
    """The checkpoint's size: measured from its files when they are on disk (local, built-in or cached Hub
    snapshot: safetensors headers and config.json, no weights read), else the footprint the model set records."""
    from types import SimpleNamespace

    from tokenrouter.engine.loader import load_config, loadable_source

    src = loadable_source(spec.source)
    if src.is_local:
        return Size(weights_numel(src.location, src.gguf_file), load_config(spec.source), True)
    f = spec.footprint
    if f is None:
        raise UserError(f"model {spec.name!r}: {spec.source} is not on disk and the model set records no footprint "
                        "(download it, or add models.members.N.footprint: {params, layers, heads, kv_heads, head_dim})")
    shape = SimpleNamespace(num_hidden_layers=f.layers, num_attention_heads=f.heads, num_key_value_heads=f.kv_heads,
                            head_dim=f.head_dim)
    return Size(f.params, shape, False)


def planned_models(specs: list[ModelSpec]) -> list[ModelSpec]:
    """The models the joint plan covers: weighted models on CUDA devices (host memory is not planned)."""
    return [s for s in specs if s.device.startswith("cuda") and s.engine != "sim"]


def demand(spec: ModelSpec, numel: int, config: object) -> Demand:
    """A model's demand per device, from its parameter count and config."""
    from tokenrouter.engine.placement import rank_device

    per_token = kv_bytes_per_token(config, spec.dtype, spec.tp)
    fixed = spec.kv_bytes if spec.kv_bytes is not None else spec.kv_tokens * per_token
    # the torch engine gathers one layer's K and V of the batch per layer: at most a layer's share of the pool
    overhead = 1 / int(config.num_hidden_layers) if spec.engine == "torch" else 0.0
    return Demand(spec.name, tuple(rank_device(spec, r) for r in range(spec.tp)),
                  numel * _ITEMSIZE[spec.dtype] // spec.tp, per_token,
                  spec.mem_fraction if spec.kv_bytes is None else None, fixed,
                  reserve_bytes(spec.engine, spec.tp), overhead)


def planned(spec: ModelSpec, kv_bytes: int, per_token: int) -> ModelSpec:
    """`spec` with its planned KV as the engine takes it: torch -> kv_bytes; sglang -> kv_tokens (SGLang's
    max_total_tokens, with no fraction left for SGLang to measure against free memory)."""
    if spec.engine == "sglang":
        return replace(spec, kv_tokens=kv_bytes // per_token, mem_fraction=None)
    return replace(spec, kv_bytes=kv_bytes, mem_fraction=None)


def plan_specs(specs: list[ModelSpec], totals: dict[str, int] | None = None) -> list[ModelSpec]:
    """The specs with each CUDA model's mem_fraction turned into an absolute KV size (`planned`). CPU models
    are left as they are: host memory is not planned. `totals` (device -> bytes) defaults to this machine's
    CUDA devices."""
    cuda = planned_models(specs)
    if not cuda:
        return specs
    demands = [demand(s, size.numel, size.config) for s, size in ((s, model_size(s)) for s in cuda)]
    kv = plan_memory(demands, cuda_totals() if totals is None else totals)
    per_token = {d.name: d.kv_bytes_per_token for d in demands}
    return [planned(s, kv[s.name], per_token[s.name]) if s.name in kv else s for s in specs]


def cuda_totals() -> dict[str, int]:
    """Total memory of each visible CUDA device (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    return {f"cuda:{i}": torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())}
