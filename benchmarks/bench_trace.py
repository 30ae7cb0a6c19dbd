"""What `runtime.trace` costs: throughput with tracing off and on, alternating rounds, side by side.

  .venv/bin/python benchmarks/bench_trace.py                  # paper step times + zero-latency, ~3 min
  .venv/bin/python benchmarks/bench_trace.py --rounds 5 --settings paper

Settings: `paper` is the sim pair at the paper's validation step times (6.0 / 27.9 ms, sim-r2r), where the
goal is <= 3% of throughput; `zero` is the same pair with zero-latency steps, where the runtime's own loop is
all there is, so the per-batch cost of recording shows (an upper bound no GPU step time reaches). Each round
runs TokenRouter and lock-step, bernoulli route_prob 0.35, N closed-loop requests, trace off then on (the order
alternates between rounds); the table gives the median throughput of each and the ratio on/off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from evals.bench import drive
from tokenrouter import event_loop
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.engine.base import SamplingParams
from tokenrouter.generation import GenerationRequest
from tokenrouter.system import ServingSystem

SETTINGS = {"paper": (6.0, 27.9), "zero": (0.0, 0.0)}


def models(small_ms: float, large_ms: float) -> list[ModelSpec]:
    return [ModelSpec(name="small", engine="sim", sim=SimSpec(latency_ms=small_ms)),
            ModelSpec(name="large", engine="sim", sim=SimSpec(latency_ms=large_ms))]


def build(system: str, specs: list[ModelSpec], trace: bool) -> ServingSystem:
    algorithm = AlgorithmSpec("bernoulli", {"route_prob": 0.35})
    runtime = RuntimeConfig(trace=trace, thresholds=[1, 2])
    if system == "tokenrouter":
        from tokenrouter.runtime.frontend import TokenRouterFrontend

        return TokenRouterFrontend(specs, algorithm, runtime)
    from baselines.lockstep import LockstepSystem

    return LockstepSystem(specs, algorithm, runtime)


async def one_run(system: str, specs: list[ModelSpec], trace: bool, n: int, requests: int, tokens: int) -> float:
    reqs = [GenerationRequest(prompt_ids=[1 + i % 50] * 16, max_new_tokens=tokens, sampling=SamplingParams(),
                              seed=i, index=i) for i in range(requests)]
    sys_ = build(system, specs, trace)
    await sys_.start()
    try:
        results, elapsed, crash = await drive(sys_, reqs, n, lambda _: None)
    finally:
        await sys_.close()
    if crash:
        raise RuntimeError(crash)
    if trace and sys_.trace_log() is not None and not sys_.trace_log().batches:
        raise RuntimeError("tracing was on but nothing was recorded")
    return sum(len(r.output_ids) for r in results) / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-n", "--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--tokens", type=int, default=100)
    args = p.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    print(f"N={args.concurrency}, {args.requests} requests x {args.tokens} tokens, bernoulli 0.35, "
          f"{args.rounds} alternating rounds")
    print(f"{'setting':<8} {'system':<12} {'off tok/s':>10} {'on tok/s':>10} {'on/off':>8}  per-round ratios")
    for setting in args.settings:
        specs = models(*SETTINGS[setting])
        for system in ("tokenrouter", "lockstep"):
            got: dict[bool, list[float]] = {False: [], True: []}
            for k in range(args.rounds):
                for trace in ((False, True) if k % 2 == 0 else (True, False)):
                    got[trace].append(event_loop.run(one_run(system, specs, trace, args.concurrency,
                                                             args.requests, args.tokens)))
            off, on = statistics.median(got[False]), statistics.median(got[True])
            ratios = " ".join(f"{b / a:.3f}" for a, b in zip(got[False], got[True], strict=True))
            print(f"{setting:<8} {system:<12} {off:>10.1f} {on:>10.1f} {on / off:>8.3f}  {ratios}", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({time.strftime('%H:%M:%S')})")


if __name__ == "__main__":
    main()
