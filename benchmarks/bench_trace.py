"""What `runtime.trace` costs: throughput with tracing off and on, alternating rounds, side by side.

  .venv/bin/python benchmarks/bench_trace.py                  # paper step times + zero-latency, ~3 min
  .venv/bin/python benchmarks/bench_trace.py --rounds 5 --settings paper

Settings: `paper` is the sim pair at the paper's validation step times (6.0 / 27.9 ms, sim-r2r), where the
goal is <= 3% of throughput; `zero` is the same pair with zero-latency steps, where the runtime's own loop is
all there is, so the per-batch cost of recording shows (an upper bound no GPU step time reaches). Each round
runs TokenRouter and lock-step, bernoulli route_prob 0.35, N closed-loop requests, trace off then on (the order
alternates between rounds); the table gives the median throughput of each and the ratio on/off.

  .venv/bin/python benchmarks/bench_trace.py memory [--rows 4 16 64] [--batches 20000]

`memory`: what a trace costs the server's memory (docs/see_a_run.md#limits), per batch row (request-step): the
batch records as the front end holds them (decoded from the subservers' Reports) with the finished requests'
spans (256 tokens each), then the peak added while `serve` writes trace.json (streamed), and the file. Every
batch runs on the other model, so every token is a run and a hand-off flow of its own: the worst case for the
document's size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tokenrouter import event_loop
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.engine.base import SamplingParams
from tokenrouter.evals.bench import drive
from tokenrouter.generation import GenerationRequest, GenerationResult
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
    from tokenrouter.baselines.lockstep import LockstepSystem

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


def memory(rows: int, batches: int, path: str) -> tuple[float, float, float]:
    """Bytes per batch row: held (records + spans), added at the peak of writing trace.json, the file."""
    import tracemalloc

    from tokenrouter.runtime.messages import Report, decode, encode
    from tokenrouter.trace.chrome import write_chrome_trace
    from tokenrouter.trace.record import BatchRecorder, TraceLog

    tracemalloc.start()
    log = TraceLog(["small", "large"], batches, "tokenrouter")
    recorders = [BatchRecorder(0, batches), BatchRecorder(1, batches)]
    active: dict[str, tuple[float, list[tuple[float, int, str]]]] = {}
    t, nxt = 0.0, 0
    for k in range(batches):
        while len(active) < rows:
            active[str(nxt)], nxt = (t, []), nxt + 1
        rids = list(active)
        recorders[k % 2].record(t, t + 0.005, 0.004, [t] * rows, rids, [1] * rows, rows, rows, 4, rows, rows, False)
        for rid in rids:
            arrival, commits = active[rid]
            commits.append((t, 1, log.models[k % 2]))
            if len(commits) == 256:
                del active[rid]
                log.finished(GenerationResult(int(rid), [1], [1] * 256, "length", arrival_s=arrival,
                                              first_token_s=arrival, finish_s=t, commits=commits), rid)
        t += 0.005
        if k % 64 == 63:  # shipped as the subservers do
            for rec in recorders:
                log.add(decode(encode([Report(rec.model, trace=rec.take())]))[0].trace)
    for rec in recorders:
        log.add(decode(encode([Report(rec.model, trace=rec.take())]))[0].trace)
    del recorders, active
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    write_chrome_trace(Path(path), log, log.models, "tokenrouter", log.requests)
    extra = tracemalloc.get_traced_memory()[1] - held
    tracemalloc.stop()
    n = batches * rows
    return held / n, extra / n, os.path.getsize(path) / n


def main() -> None:
    if sys.argv[1:2] == ["memory"]:
        p = argparse.ArgumentParser(description="bench_trace.py memory: see the module's docstring")
        p.add_argument("--rows", type=int, nargs="+", default=[4, 16, 64])
        p.add_argument("--batches", type=int, default=20_000)
        args = p.parse_args(sys.argv[2:])
        print(f"{'rows/batch':>10} {'held B/row':>11} {'writing +B/row':>15} {'peak B/row':>11} {'file B/row':>11} "
              f"{'2 models at the cap':>20}")
        with tempfile.TemporaryDirectory() as tmp:
            for rows in args.rows:
                held, extra, size = memory(rows, args.batches, f"{tmp}/trace.json")
                total = 2 * args.batches * rows * (held + extra) / 2**20
                print(f"{rows:>10} {held:>11.0f} {extra:>15.0f} {held + extra:>11.0f} {size:>11.0f} {total:>16.0f} MiB",
                      flush=True)
        return
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
