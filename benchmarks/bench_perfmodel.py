"""Throughput-model speed and the headline predictions, printed as figures.

    .venv/bin/python benchmarks/bench_perfmodel.py            # all figures (a few minutes on 2 cores)
    .venv/bin/python benchmarks/bench_perfmodel.py --quick    # skip the slow 3-model run at delta = 0.1 ms

Goals: optimize r2r at N = 16 <= 10 s; one throughput at N = 64 <= 5 s; optimize a 3-model
ensemble at N = 8 <= 30 s. Also: B*(N) table time for `thresholds=auto`, and tokenrouter (auto thresholds)
against lock-step R2R on the sim-r2r setting (p = 0.35, 6.0 / 27.9 ms).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.perfmodel import SystemSpec, auto_thresholds, optimize, preset, throughput
from tokenrouter.perfmodel.lockstep import lockstep_throughput

SMALL, LARGE = 6.0, 27.9
ENSEMBLE_MS = (6.0, 15.0, 27.9)  # Qwen3 0.6B / 8B / 32B-like steps; weights as in the paper's ME setting
ENSEMBLE_W = (0.5, 0.3, 0.2)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def r2r(quantum: float | None) -> SystemSpec:
    return SystemSpec.build(*preset("r2r", route_prob=0.35), [SMALL, LARGE], quantum)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip the 3-model optimize at delta = 0.1 ms")
    args = ap.parse_args()

    res, s = timed(lambda: optimize(r2r(0.1), 16))
    print(
        f"optimize r2r N=16 delta=0.1ms: {s:.2f} s (goal <= 10) best {list(res.best.thresholds)} "
        f"{res.best.throughput_tok_s:.1f} tok/s, {len(res.evaluated)} points, exhaustive={res.exhaustive}"
    )

    for thr in ([6, 40], [1, 1]):  # B*(64) and the largest chain
        one, s = timed(lambda thr=thr: throughput(r2r(0.1), 64, thr))
        print(
            f"throughput r2r N=64 B={thr} delta=0.1ms: {s:.2f} s (goal <= 5) {one.throughput_tok_s:.1f} tok/s, "
            f"{one.num_states} states"
        )

    ens_deltas = (0.5, 0.25) if args.quick else (0.5, 0.25, 0.1)
    results = {}
    for delta in ens_deltas:
        spec = SystemSpec.build(*preset("ensemble", weights=ENSEMBLE_W), list(ENSEMBLE_MS), delta)
        res, s = timed(lambda spec=spec: optimize(spec, 8))
        results[delta] = res
        print(
            f"optimize ensemble (3 models) N=8 delta={delta}ms: {s:.2f} s (goal <= 30) best "
            f"{list(res.best.thresholds)} {res.best.throughput_tok_s:.1f} tok/s, {len(res.evaluated)} points, "
            f"exhaustive={res.exhaustive}"
        )
    fine = SystemSpec.build(*preset("ensemble", weights=ENSEMBLE_W), list(ENSEMBLE_MS), 0.1)
    for delta, res in results.items():
        if delta != 0.1:
            exact = throughput(fine, 8, res.best.thresholds).throughput_tok_s
            print(
                f"  delta={delta}ms: its best {list(res.best.thresholds)} predicts {res.best.throughput_tok_s:.1f} "
                f"tok/s; the same thresholds at delta=0.1ms: {exact:.1f} tok/s"
            )

    lat = [LatencyProfile.constant(SMALL), LatencyProfile.constant(LARGE)]
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TOKENROUTER_CACHE"] = cache
        for max_n in (8, 16):
            table, s = timed(
                lambda max_n=max_n: auto_thresholds(*preset("bernoulli", route_prob=0.35), lat, max_n)
            )
            _, again = timed(
                lambda max_n=max_n: auto_thresholds(*preset("bernoulli", route_prob=0.35), lat, max_n)
            )
            print(
                f"auto_thresholds r2r N=1..{max_n} (auto quantum, cold cache): {s:.2f} s, cached: {again * 1000:.1f} ms"
            )
        print(f"  B*(N): {table}")

    for n in (4, 8):
        spec = r2r(0.1)
        best = table[n]
        router = throughput(spec, n, best).throughput_tok_s
        lock = lockstep_throughput(spec, n)
        print(
            f"sim-r2r N={n}: tokenrouter auto B={best} {router:.1f} tok/s vs lock-step R2R {lock:.1f} tok/s "
            f"-> predicted ratio {router / lock:.3f}"
        )


if __name__ == "__main__":
    main()
