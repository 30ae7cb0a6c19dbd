"""First-run checks of the GPU paths, in one command, with tiny random models built in code (no Hub).

Why: nothing else in the test suite runs CUDA; this script checks in a few minutes what would otherwise
fail hours into a sweep: greedy equality with HF on CUDA (bf16, fp32), TokenRouter over two models on one GPU
and on two GPUs, TP=2 on NCCL (each rank loading onto its own GPU), device memory after start-up (the driver's
figure) within the joint plan, lock-step releasing its GPU memory between jobs, start-up profiles and the
step-latency table. (SGLang's decode-graph replays are counted by tests/engine/test_sglang_engine_cuda.py,
in .venv-sglang: SGLang's venv is too large to carry to a lent GPU machine.) One line per check, `PASS name: detail` or `FAIL name: detail`; exit status 1 on any FAIL.
Without CUDA it says so in one line and runs the checks a CPU can (exit 0 when they pass).

    .venv/bin/python benchmarks/gpu_check.py [--out DIR]     # < 10 minutes on a GPU machine
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.base import StepItem
from tokenrouter.engine.factory import build_engine, close_engines
from tokenrouter.generation import GenerationRequest
from tokenrouter.models.tiny_random import save_random_decoder

PROMPTS = [[5, 17, 33, 8], [2, 9, 40, 41, 7, 3, 88, 12, 19], [60, 61, 62]]
NEW_TOKENS = 24
FAILED: list[str] = []


def report(name: str, fn: Callable[[], str]) -> None:
    """Run one check and print its line; a check fails by raising."""
    start = time.perf_counter()
    try:
        detail = fn()
    except Exception as exc:  # noqa: BLE001 - every failure is one FAIL line, then the next check runs
        FAILED.append(name)
        print(f"FAIL {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
        return
    print(f"PASS {name}: {detail} ({time.perf_counter() - start:.1f} s)", flush=True)


def engine_greedy(spec: ModelSpec) -> list[list[int]]:
    """Greedy continuations of PROMPTS from our engine: one prefill step for all, then batched decodes."""
    engine = build_engine(spec)
    try:
        out = engine.step([StepItem(f"r{i}", p) for i, p in enumerate(PROMPTS)])
        tokens = [[t] for t in out.next_tokens]
        for _ in range(NEW_TOKENS - 1):
            out = engine.step([StepItem(f"r{i}", [t[-1]]) for i, t in enumerate(tokens)])
            for t, nxt in zip(tokens, out.next_tokens, strict=True):
                t.append(nxt)
        return tokens
    finally:
        close_engines([engine])


def hf_greedy(path: Path, dtype: str, device: str) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
    out = []
    with torch.no_grad():
        for p in PROMPTS:
            ids = model.generate(torch.tensor([p], device=device), max_new_tokens=NEW_TOKENS, do_sample=False,
                                 min_new_tokens=NEW_TOKENS)
            out.append(ids[0, len(p):].tolist())
    del model
    return out


def check_hf_equality(path: Path, dtype: str, device: str) -> str:
    ours = engine_greedy(ModelSpec(name="eq", source=str(path), dtype=dtype, device=device, kv_tokens=4096))
    theirs = hf_greedy(path, dtype, device)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            first = next(k for k, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
            raise AssertionError(f"prompt {i} differs from HF generate at output position {first}")
    return f"{len(PROMPTS)} prompts x {NEW_TOKENS} tokens identical to HF generate on {device} in {dtype}"


def pair_specs(small: Path, large: Path, dtype: str, devices: tuple[str, str], **extra: object) -> list[ModelSpec]:
    return [ModelSpec(name="small", source=str(small), dtype=dtype, device=devices[0], **extra),
            ModelSpec(name="large", source=str(large), dtype=dtype, device=devices[1], **extra)]


def requests() -> list[GenerationRequest]:
    return [GenerationRequest(p, max_new_tokens=NEW_TOKENS, index=i, seed=i, stop_token_ids=[])
            for i, p in enumerate(PROMPTS * 3)]


def check_tokenrouter(specs: list[ModelSpec]) -> str:
    """Two subservers, bernoulli routing, thresholds=auto from start-up profiles (measured now: fresh cache)."""
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    async def run() -> tuple[list, TokenRouterFrontend]:
        router = TokenRouterFrontend(specs, AlgorithmSpec("bernoulli", {"route_prob": 0.3}), RuntimeConfig())
        async with router:
            return await router.generate_many(requests()), router

    results, router = asyncio.run(run())
    errors = [r.error for r in results if r.error]
    if errors:
        raise AssertionError(f"{len(errors)} of {len(results)} requests failed, e.g. {errors[0]}")
    large = sum(r.tokens_per_model["large"] for r in results)
    if not large:
        raise AssertionError("no token was routed to the large model")
    profiles = {m: p.get("decode_ms") for m, p in router.latency_profiles.items()}
    if len(profiles) != len(specs):
        raise AssertionError(f"start-up profiles for {sorted(profiles)} only")
    kv = {m.name: m.kv_bytes for m in router.models}
    return (f"{len(results)} requests on {[s.device for s in specs]}, {large} large-model tokens; "
            f"planned kv_bytes {kv}; start-up profiles (decode ms by batch) {profiles}; "
            f"thresholds from {router.thresholds_source}")


def check_lockstep_memory(specs: list[ModelSpec], device: str) -> str:
    """Two lock-step jobs in one process (as a Hydra sweep runs them): memory must return to the baseline."""
    from tokenrouter.baselines.lockstep import LockstepSystem

    async def job() -> None:
        system = LockstepSystem(specs, AlgorithmSpec("bernoulli", {"route_prob": 0.3}), RuntimeConfig())
        await system.start()
        try:
            results = await asyncio.gather(*(system.generate(r) for r in requests()))
        finally:
            await system.close()
        if any(r.error for r in results):
            raise AssertionError(next(r.error for r in results if r.error))

    if not device.startswith("cuda"):
        asyncio.run(job())
        return "lock-step ran on CPU (memory release is measured on CUDA only)"
    gc.collect()
    base = torch.cuda.memory_allocated(device)
    peaks = []
    for _ in range(2):
        torch.cuda.reset_peak_memory_stats(device)
        asyncio.run(job())
        peaks.append(torch.cuda.max_memory_allocated(device))
        left = torch.cuda.memory_allocated(device) - base
        if left > 2**20:
            raise AssertionError(f"{left / 2**20:.1f} MiB still allocated on {device} after close()")
    return f"allocated back to baseline after each of 2 jobs (peaks {[f'{p / 2**20:.0f} MiB' for p in peaks]})"


def device_used(index: int) -> int:
    """Bytes in use on a GPU by every process (the driver's figure, not this process's allocator counters)."""
    free, total = torch.cuda.mem_get_info(index)
    return total - free


def check_tp_placement(large: Path) -> str:
    """TP=2 from cuda:0: rank 1 must load onto cuda:1 (transformers binds cuda:$LOCAL_RANK), and loading must
    not pass device_map beside the TP plan (transformers refuses both)."""
    before = [device_used(0), device_used(1)]
    engine = build_engine(ModelSpec(name="tp2", source=str(large), dtype="float32", device="cuda:0", tp=2,
                                    kv_tokens=4096))
    try:
        grown = [device_used(i) - b for i, b in enumerate(before)]
    finally:
        close_engines([engine])
    if min(grown) < 2**20:
        raise AssertionError(f"TP=2 ranks did not both load: device memory grew by {grown} bytes on cuda:0/cuda:1")
    return f"rank memory on cuda:0 / cuda:1 grew by {[f'{g / 2**20:.0f} MiB' for g in grown]}"


def check_tp(large: Path) -> str:
    common = dict(source=str(large), dtype="float32", device="cuda:0", kv_tokens=4096)
    one = engine_greedy(ModelSpec(name="tp1", **common))
    two = engine_greedy(ModelSpec(name="tp2", tp=2, **common))
    if one != two:
        raise AssertionError("TP=2 greedy tokens differ from TP=1 in float32")
    return f"TP=2 (NCCL, cuda:0 + cuda:1) greedy equal to TP=1 on {len(PROMPTS)} prompts"


def check_memory_against_plan(specs: list[ModelSpec]) -> str:
    """Two subservers sharing cuda:0: what the DRIVER reports in use after start-up stays within the sum of
    their mem_fractions (plus this process's own context), whichever started first."""
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    free, total = torch.cuda.mem_get_info(0)
    base = total - free

    async def run() -> int:
        router = TokenRouterFrontend(specs, AlgorithmSpec("bernoulli", {"route_prob": 0.3}), RuntimeConfig())
        async with router:
            await router.generate_many(requests())
            return device_used(0)

    used = asyncio.run(run()) - base
    budget = sum(s.mem_fraction or 0 for s in specs) * total
    if used > budget:
        raise AssertionError(f"{used / 2**30:.2f} GiB in use on cuda:0 after start-up, over the plan's "
                             f"{budget / 2**30:.2f} GiB")
    return f"{used / 2**30:.2f} GiB in use on cuda:0 (driver) within the plan's {budget / 2**30:.2f} GiB"


def check_step_latency(large: Path, dtype: str, device: str) -> str:
    from tokenrouter.engine.profiling import kv_needed, measure

    sizes, context, steps, extend = ([1, 8, 32], 256, 10, 64) if device != "cpu" else ([1, 4], 64, 4, 16)
    engine = build_engine(ModelSpec(name="large", source=str(large), dtype=dtype, device=device,
                                    kv_tokens=kv_needed(sizes, context, steps, extend, 16)))
    try:
        measured = measure(engine, sizes, [context], steps, extend)
    finally:
        close_engines([engine])
    table = ", ".join(f"b{b}={ms:.2f}" for b, ms in measured.decode_ms.items())
    return f"{device} {dtype} context {context}: decode ms {table}; extend {measured.extend_ms_per_token:.4f} ms/token"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="where to build the tiny models (default: a temp dir)")
    args = p.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per check
    os.environ["TOKENROUTER_CACHE"] = str(root / "cache")  # fresh start-up profiles: they are measured here
    # head_dim 64 and GQA (2 query heads per kv head) so CUDA runs the fused SDPA kernels the real models use
    small = save_random_decoder(root / "small", num_layers=2, hidden_size=128, num_heads=2, num_kv_heads=1, seed=1)
    large = save_random_decoder(root / "large", num_layers=4, hidden_size=256, num_heads=4, num_kv_heads=2, seed=2)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        print("no CUDA device: running the CPU-capable checks only (exit 0 when they pass)", flush=True)
        report("hf_equality_float32_cpu", lambda: check_hf_equality(large, "float32", "cpu"))
        report("tokenrouter_cpu", lambda: check_tokenrouter(
            pair_specs(small, large, "float32", ("cpu", "cpu"), latency_profile="auto")))
        report("lockstep_cpu", lambda: check_lockstep_memory(pair_specs(small, large, "float32", ("cpu", "cpu"),
                                                                         kv_tokens=4096), "cpu"))
        report("step_latency_cpu", lambda: check_step_latency(large, "float32", "cpu"))
        print(f"{'FAIL' if FAILED else 'PASS'} gpu_check (CPU only): {len(FAILED)} failed {FAILED}", flush=True)
        return 1 if FAILED else 0
    for dtype in ("float32", "bfloat16"):
        report(f"hf_equality_{dtype}", lambda dtype=dtype: check_hf_equality(large, dtype, "cuda:0"))
    # each process's share: weights + KV + the plan's reserve for its context and activations (~2 GiB)
    shared = {"mem_fraction": 0.1, "latency_profile": "auto"}
    report("tokenrouter_one_gpu", lambda: check_tokenrouter(
        pair_specs(small, large, "bfloat16", ("cuda:0", "cuda:0"), **shared)))
    if gpus >= 2:
        report("tokenrouter_two_gpus", lambda: check_tokenrouter(
            pair_specs(small, large, "bfloat16", ("cuda:0", "cuda:1"), **shared)))
        report("tp2_placement", lambda: check_tp_placement(large))
        report("tp2", lambda: check_tp(large))
    else:
        print("SKIP tokenrouter_two_gpus, tp2: one CUDA device", flush=True)
    report("memory_within_plan", lambda: check_memory_against_plan(
        pair_specs(small, large, "bfloat16", ("cuda:0", "cuda:0"), **shared)))
    report("lockstep_memory_released", lambda: check_lockstep_memory(
        pair_specs(small, large, "bfloat16", ("cuda:0", "cuda:0"), mem_fraction=0.1), "cuda:0"))
    report("step_latency", lambda: check_step_latency(large, "bfloat16", "cuda:0"))
    print(f"{'FAIL' if FAILED else 'PASS'} gpu_check: {len(FAILED)} failed {FAILED}", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    raise SystemExit(main())
