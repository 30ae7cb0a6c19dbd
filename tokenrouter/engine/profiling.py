"""Measure an engine's step latencies: decode ms per batch size and the extend cost per token.

Why shared: `tokenrouter profile` prints them, and a subserver whose model says `latency_profile: auto`
measures them at start-up so `runtime.thresholds=auto` works on any hardware without a manual step (the
result is cached per model, dtype, device and settings, so only the first start pays). The JSON form is
the one `LatencyProfile.from_json` reads.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

from tokenrouter.engine.base import Engine, StepItem
from tokenrouter.errors import UserError

log = logging.getLogger(__name__)

WARMUP = 2
AUTO_CONTEXT = 256
AUTO_STEPS = 10
AUTO_EXTEND = 64


def _timed_step(engine: Engine, items: list[StepItem]) -> float:
    """Wall milliseconds of one step (CUDA work included). Syncs the engine's own device: a bare synchronize()
    syncs the current device (GPU 0 unless set) and opens a stray CUDA context there from other GPUs' processes."""
    device = getattr(engine, "device", None)
    if device is not None and device.type == "cuda":
        import torch

        def sync() -> None:
            torch.cuda.synchronize(device)
    else:
        def sync() -> None:
            return None
    sync()
    t0 = time.perf_counter()
    engine.step(items)
    sync()
    return (time.perf_counter() - t0) * 1e3


def kv_needed(batch_sizes: list[int], context: int, steps: int, extend_tokens: int, page_size: int) -> int:
    """KV tokens a profile run holds at its peak."""
    return max(max(batch_sizes) * (context + WARMUP + steps + page_size), context + extend_tokens + page_size)


def measure(engine: Engine, batch_sizes: list[int], context: int, steps: int, extend_tokens: int,
            seed: int = 0) -> tuple[dict[str, float], float]:
    """(decode ms per batch size, extend ms per extra token). Leaves the engine's KV as it found it."""
    rng = random.Random(seed)
    vocab = engine.vocab_size

    def prefill(rids: list[str]) -> None:
        for rid in rids:  # one request per step keeps prefill memory small
            engine.step([StepItem(rid, [rng.randrange(vocab) for _ in range(context)])])

    decode_ms: dict[str, float] = {}
    for b in batch_sizes:
        rids = [f"profile-{i}" for i in range(b)]
        prefill(rids)
        times = []
        for s in range(WARMUP + steps):
            ms = _timed_step(engine, [StepItem(r, [rng.randrange(vocab)]) for r in rids])
            if s >= WARMUP:
                times.append(ms)
        decode_ms[str(b)] = round(statistics.median(times), 4)
        for r in rids:
            engine.release(r)
    prefill(["profile-x"])
    ext, one = [], []
    for s in range(WARMUP + max(3, steps // 2)):
        t_ext = _timed_step(engine, [StepItem("profile-x", [rng.randrange(vocab) for _ in range(extend_tokens)])])
        engine.truncate("profile-x", context)
        t_one = _timed_step(engine, [StepItem("profile-x", [rng.randrange(vocab)])])
        engine.truncate("profile-x", context)
        if s >= WARMUP:
            ext.append(t_ext)
            one.append(t_one)
    engine.release("profile-x")
    per_token = max(0.0, (statistics.median(ext) - statistics.median(one)) / (extend_tokens - 1))
    return decode_ms, round(per_token, 5)


def profile_dict(model: str, device: str, dtype: str, context: int, decode_ms: dict[str, float],
                 per_token: float) -> dict[str, Any]:
    return {"model": model, "device": device, "dtype": dtype, "context": context, "decode_ms": decode_ms,
            "extend_ms_per_token": per_token}


def auto_batch_sizes(max_concurrency: int) -> list[int]:
    """Powers of two up to the largest N the thresholds are searched for (L(b) is interpolated between)."""
    sizes, b = [], 1
    while b < max_concurrency:
        sizes.append(b)
        b *= 2
    return sizes + [max(1, max_concurrency)]


def _device_name(engine: Engine) -> str:
    device = getattr(engine, "device", None)
    if device is not None and device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return f"{platform.machine()} {platform.processor()}".strip()


def profile_at_startup(engine: Engine, spec_fields: dict[str, Any], max_concurrency: int,
                       cache: Path) -> dict[str, Any]:
    """The `latency_profile: auto` profile of this engine: from `cache` when this model, dtype, device and
    settings were measured before, else measured now (seconds) and cached."""
    sizes = auto_batch_sizes(max_concurrency)
    page = int(spec_fields.get("page_size", 16))
    free = engine.tokens_free()
    while len(sizes) > 1 and kv_needed(sizes, AUTO_CONTEXT, AUTO_STEPS, AUTO_EXTEND, page) > free:
        sizes.pop()  # a small pool: profile the batch sizes that fit (larger ones are extrapolated)
    if (need := kv_needed(sizes, AUTO_CONTEXT, AUTO_STEPS, AUTO_EXTEND, page)) > free:
        raise UserError(f"model {spec_fields.get('name')!r}: latency_profile auto needs {need} free KV tokens "
                        f"to profile, the pool has {free}; raise kv_tokens or give a `tokenrouter profile` JSON")
    key_fields = [spec_fields.get(k) for k in ("source", "engine", "dtype", "device", "threads", "sim")]
    if spec_fields.get("engine") == "sglang":  # CUDA graphs and TP change SGLang's step times
        key_fields += [spec_fields.get("cuda_graph"), spec_fields.get("tp")]
    key = json.dumps([key_fields, _device_name(engine), sizes, AUTO_CONTEXT, AUTO_STEPS, AUTO_EXTEND],
                     sort_keys=True, default=str)
    path = cache / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
    if (cached := _read(path)) is not None:
        return cached
    cache.mkdir(parents=True, exist_ok=True)
    # One profile at a time on this host: subservers start together, and models sharing a GPU (or the CPU
    # cores) would otherwise measure each other's work.
    with open(cache / "profiling.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (cached := _read(path)) is not None:  # measured by another process while we waited
            return cached
        start = time.perf_counter()
        decode_ms, per_token = measure(engine, sizes, AUTO_CONTEXT, AUTO_STEPS, AUTO_EXTEND)
        profile = profile_dict(str(spec_fields.get("name")), str(getattr(engine, "device", "cpu")),
                               str(spec_fields.get("dtype")), AUTO_CONTEXT, decode_ms, per_token)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(profile, indent=2) + "\n")
        tmp.replace(path)
    log.info("profiled %s in %.1f s -> %s", spec_fields.get("name"), time.perf_counter() - start, path)
    return profile


def _read(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        log.warning("ignoring a corrupt cached latency profile %s", path)
        return None
