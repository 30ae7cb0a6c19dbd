"""Measure an engine's step latencies: decode ms per (context length, batch size) and the extend cost per token.

Why shared: `tokenrouter profile` prints them, and a subserver whose model says `latency_profile: auto`
measures them at start-up so `runtime.thresholds=auto` works on any hardware without a manual step (the
result is cached per model, dtype, device, settings and the members sharing its device, so only the first
start pays). Several contexts, because a step at 8k tokens of KV costs more than at 256 and thresholds=auto
wants the step times at the workload's mean context. The JSON form is the one `LatencyProfile.from_json` reads.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenrouter.engine.base import Engine, StepItem
from tokenrouter.errors import UserError

log = logging.getLogger(__name__)

WARMUP = 2
MIN_STEPS = 3
AUTO_CONTEXTS = (256, 2048, 8192)  # AMC23-style answers reach 8k tokens; steps there cost more than at 256
AUTO_STEPS = 10  # at the base context; fewer at longer ones (steps_at)
AUTO_EXTEND = 64
AUTO_BUDGET_S = 60.0  # start-up profiling leaves out longer contexts predicted to end past this


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
    """KV tokens a profile run at `context` holds at its peak."""
    return max(max(batch_sizes) * (context + WARMUP + steps + page_size), context + extend_tokens + page_size)


def steps_at(steps: int, context: int, base: int) -> int:
    """Timed steps at `context`: fewer at long contexts (each step costs more, and the prefills dominate)."""
    return max(min(steps, MIN_STEPS), steps * base // context)


@dataclass
class ContextPlan:
    """The contexts a profile measures (ascending) and, per context left out, why."""

    contexts: list[int]
    skipped: dict[int, str] = field(default_factory=dict)


def plan_contexts(contexts: list[int], batch_sizes: list[int], steps: int, extend_tokens: int, free_tokens: int,
                  page_size: int, max_positions: int | None) -> ContextPlan:
    """Leave out the contexts the pool cannot hold for the largest batch or the model cannot position, and
    measure the longest context that fits instead when it is longer than every kept one (so a long-answer
    workload still gets the longest step times this pool can serve)."""
    def positions_ok(c: int) -> bool:
        return max_positions is None or c + WARMUP + max(steps, extend_tokens) <= max_positions

    def fits(c: int) -> bool:
        return positions_ok(c) and kv_needed(batch_sizes, c, steps, extend_tokens, page_size) <= free_tokens

    wanted = sorted(set(contexts))
    kept = [c for c in wanted if fits(c)]
    skipped = {c: (f"beyond the model's {max_positions} positions" if not positions_ok(c) else
                   f"the KV pool ({free_tokens} tokens) cannot hold batch {max(batch_sizes)} at this context")
               for c in wanted if c not in kept}
    if skipped:
        lo, hi = 0, max(skipped)  # the longest context that fits: fits() is monotone in c
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        if lo > max(kept, default=0):
            kept.append(lo)
    return ContextPlan(kept, skipped)


@dataclass
class Measured:
    """What `measure` found: decode ms per batch size per context, and the extend cost at the base context."""

    decode_ms_by_context: dict[int, dict[str, float]]
    extend_ms_per_token: float
    skipped: dict[int, str] = field(default_factory=dict)

    @property
    def context(self) -> int:
        """The base (shortest) context: where `decode_ms` and the extend cost were measured."""
        return min(self.decode_ms_by_context)

    @property
    def decode_ms(self) -> dict[str, float]:
        return self.decode_ms_by_context[self.context]


def measure(engine: Engine, batch_sizes: list[int], contexts: list[int], steps: int, extend_tokens: int,
            seed: int = 0, budget_s: float | None = None) -> Measured:
    """Decode ms per batch size at each context (`steps_at` timed steps), and the extend cost per extra token at
    the shortest one (always measured). `budget_s`: leave out a longer context whose predicted cost (the previous context's time,
    scaled by length) would end past this many seconds. Leaves the engine's KV as it found it."""
    rng = random.Random(seed)
    wanted = sorted(set(contexts))
    base = wanted[0]
    by_context: dict[int, dict[str, float]] = {}
    skipped: dict[int, str] = {}
    start, last = time.perf_counter(), (base, 0.0)
    for c in wanted:
        if c != base and budget_s is not None and time.perf_counter() - start + last[1] * c / last[0] > budget_s:
            skipped[c] = f"over the profiling time budget of {budget_s:g} s"
            continue
        t0 = time.perf_counter()
        by_context[c] = _decode_table(engine, sorted(set(batch_sizes)), c, steps_at(steps, c, base), rng)
        last = (c, time.perf_counter() - t0)
    return Measured(by_context, _extend_cost(engine, base, steps, extend_tokens, rng), skipped)


def _random_tokens(rng: random.Random, vocab: int, n: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def _decode_table(engine: Engine, batch_sizes: list[int], context: int, steps: int,
                  rng: random.Random) -> dict[str, float]:
    """Median decode ms per batch size at `context`. Each request is prefilled once and reused by the larger
    batches (rolled back to `context` after each), so a context costs max(batch_sizes) prefills, not their sum."""
    rids: list[str] = []
    table: dict[str, float] = {}
    try:
        for b in batch_sizes:
            while len(rids) < b:  # one request per step keeps prefill memory small
                rids.append(f"profile-{len(rids)}")
                engine.step([StepItem(rids[-1], _random_tokens(rng, engine.vocab_size, context))])
            times = [_timed_step(engine, [StepItem(r, _random_tokens(rng, engine.vocab_size, 1)) for r in rids])
                     for _ in range(WARMUP + steps)]
            table[str(b)] = round(statistics.median(times[WARMUP:]), 4)
            for r in rids:
                engine.truncate(r, context)
    finally:
        for r in rids:
            engine.release(r)
    return table


def _extend_cost(engine: Engine, context: int, steps: int, extend_tokens: int, rng: random.Random) -> float:
    """Extra ms per token of a one-request extend step over a one-token step, at `context`."""
    vocab = engine.vocab_size
    engine.step([StepItem("profile-x", _random_tokens(rng, vocab, context))])
    ext, one = [], []
    for s in range(WARMUP + max(3, steps // 2)):
        t_ext = _timed_step(engine, [StepItem("profile-x", _random_tokens(rng, vocab, extend_tokens))])
        engine.truncate("profile-x", context)
        t_one = _timed_step(engine, [StepItem("profile-x", _random_tokens(rng, vocab, 1))])
        engine.truncate("profile-x", context)
        if s >= WARMUP:
            ext.append(t_ext)
            one.append(t_one)
    engine.release("profile-x")
    return round(max(0.0, (statistics.median(ext) - statistics.median(one)) / (extend_tokens - 1)), 5)


def profile_dict(model: str, device: str, dtype: str, measured: Measured) -> dict[str, Any]:
    """The `tokenrouter profile` JSON (tokenrouter/engine/latency.py documents it)."""
    return {"model": model, "device": device, "dtype": dtype, "context": measured.context,
            "decode_ms": measured.decode_ms,
            "decode_ms_by_context": {str(c): t for c, t in measured.decode_ms_by_context.items()},
            "contexts_skipped": {str(c): why for c, why in sorted(measured.skipped.items())},
            "extend_ms_per_token": measured.extend_ms_per_token}


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


def sharing_members(models: list[dict[str, Any]], index: int) -> list[list[Any]]:
    """[name, source] of the other members on model `index`'s device: their weights and KV traffic change its
    step times (one GPU's memory bandwidth), so a profile measured alone must not serve a shared device."""
    device = models[index].get("device")
    return [[m.get("name"), m.get("source")] for j, m in enumerate(models) if j != index and m.get("device") == device]


def profile_at_startup(engine: Engine, models: list[dict[str, Any]], index: int, max_concurrency: int,
                       cache: Path) -> dict[str, Any]:
    """The `latency_profile: auto` profile of model `index` of the set (spec dicts): from `cache` when this
    model, dtype, device, settings and device-sharing members were measured before, else measured now (within
    AUTO_BUDGET_S, longer contexts first to go) and cached."""
    spec_fields = models[index]
    sizes = auto_batch_sizes(max_concurrency)
    page = int(spec_fields.get("page_size", 16))
    free = engine.tokens_free()
    base = AUTO_CONTEXTS[0]
    while len(sizes) > 1 and kv_needed(sizes, base, AUTO_STEPS, AUTO_EXTEND, page) > free:
        sizes.pop()  # a small pool: profile the batch sizes that fit (larger ones are extrapolated)
    if (need := kv_needed(sizes, base, AUTO_STEPS, AUTO_EXTEND, page)) > free:
        raise UserError(f"model {spec_fields.get('name')!r}: latency_profile auto needs {need} free KV tokens "
                        f"to profile, the pool has {free}; raise kv_tokens or give a `tokenrouter profile` JSON")
    plan = plan_contexts(list(AUTO_CONTEXTS), sizes, AUTO_STEPS, AUTO_EXTEND, free, page, engine.max_positions)
    # TP changes every engine's step times (a torch TP 2 job must not reuse a TP 1 profile); CUDA graphs SGLang's
    key_fields = [spec_fields.get(k, 1 if k == "tp" else None)
                  for k in ("source", "engine", "dtype", "device", "threads", "sim", "tp")]
    if spec_fields.get("engine") == "sglang":
        key_fields.append(spec_fields.get("cuda_graph"))
    key = json.dumps([key_fields, _device_name(engine), sizes, plan.contexts, AUTO_STEPS, AUTO_EXTEND,
                      AUTO_BUDGET_S, sharing_members(models, index)], sort_keys=True, default=str)
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
        measured = measure(engine, sizes, plan.contexts, AUTO_STEPS, AUTO_EXTEND, budget_s=AUTO_BUDGET_S)
        measured.skipped.update(plan.skipped)
        profile = profile_dict(str(spec_fields.get("name")), str(getattr(engine, "device", "cpu")),
                               str(spec_fields.get("dtype")), measured)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(profile, indent=2) + "\n")
        tmp.replace(path)
    log.info("profiled %s in %.1f s at contexts %s -> %s", spec_fields.get("name"), time.perf_counter() - start,
             list(measured.decode_ms_by_context), path)
    return profile


def _read(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        log.warning("ignoring a corrupt cached latency profile %s", path)
        return None
