"""Is the threshold rule optimal? Predicted throughput of the best thresholds, the best rule a subserver can run
on its own observation (own queue, N), and the optimal launch policy (knows every queue and running batch).

    .venv/bin/python benchmarks/bench_policy.py            # every setting (a few minutes on 2 cores)
    .venv/bin/python benchmarks/bench_policy.py --quick    # N up to 4
    .venv/bin/python benchmarks/bench_policy.py --measure 4,8 --window 8   # and on the runtime (sim engines)

Settings: the paper's validation setting (R2R p = 0.35, 6.0 / 27.9 ms), a 3-model ensemble (weights
0.5 / 0.3 / 0.2, 6 / 15 / 28 ms at a 1 ms quantum: the optimum's state space is the union over all policies),
a 50x step ratio (1 / 50 ms), and p = 0.05 and p = 0.6.

--measure: per setting one front end on sim engines with those step times (bernoulli = R2R-shaped routing, or
ensemble), and per N two closed-loop windows side by side: runtime.policy=thresholds (B*(N)) and
runtime.policy=optimal (the best local rules, what a subserver can run). Max-wait is off, so the rule alone
decides. Sim engines sleep: CPU contention from other jobs adds latency (the load average is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from bench_runtime import _closed_loop

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.perfmodel import SystemSpec, preset
from tokenrouter.perfmodel.compare import compare
from tokenrouter.runtime.frontend import TokenRouterFrontend
from tokenrouter.runtime.thresholds import ThresholdTable

# name -> (preset, rates, latencies ms, quantum ms or None for the automatic one, largest N)
SETTINGS = {
    "validation r2r p=0.35 6.0/27.9": ("r2r", {"route_prob": 0.35}, [6.0, 27.9], None, 8),
    "ensemble 0.5/0.3/0.2 6/15/28": ("ensemble", {"weights": [0.5, 0.3, 0.2]}, [6.0, 15.0, 28.0], 1.0, 6),
    "r2r p=0.35 50x 1/50": ("r2r", {"route_prob": 0.35}, [1.0, 50.0], None, 8),
    "r2r p=0.05 6.0/27.9": ("r2r", {"route_prob": 0.05}, [6.0, 27.9], None, 8),
    "r2r p=0.6 6.0/27.9": ("r2r", {"route_prob": 0.6}, [6.0, 27.9], None, 8),
}


def _runtime_setup(kind: str, rates: dict, lat: list[float]) -> tuple[list[ModelSpec], AlgorithmSpec]:
    models = [ModelSpec(name=f"m{i}", engine="sim", kv_tokens=10**7, sim=SimSpec(latency_ms=ms, seed=i + 1))
              for i, ms in enumerate(lat)]
    algo = AlgorithmSpec("ensemble", {"weights": rates["weights"]}) if kind == "ensemble" else \
        AlgorithmSpec("bernoulli", {"route_prob": rates["route_prob"]})
    return models, algo


async def measure(ns: list[int], window_s: float, warmup_s: float) -> None:
    print(f"\n== measured on the runtime (sim engines), {window_s:g} s windows, max-wait off ==")
    print("| setting | N | policy | launch rule | predicted tok/s | measured tok/s | error | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (kind, rates, lat, quantum, max_n) in SETTINGS.items():
        models, algo = _runtime_setup(kind, rates, lat)
        async with TokenRouterFrontend(models, algo, RuntimeConfig(thresholds=[1] * len(lat), max_wait_ms=1e9)) as fe:
            for n in [x for x in ns if x <= max_n]:
                r = compare(SystemSpec.build(*preset(kind, **rates), lat, quantum, max_concurrency=n), n)
                for policy, rules, predicted in (("thresholds", {}, r.thresholds_tok_s),
                                                 ("optimal", {n: r.local_masks}, r.local_tok_s)):
                    fe.thresholds = ThresholdTable(list(r.thresholds), len(lat))  # sent with the next admission
                    fe.launch_rules = rules
                    measured = (await _closed_loop(fe, n, warmup_s, window_s))[0]
                    rule = list(r.thresholds) if policy == "thresholds" else [bin(m) for m in r.local_masks]
                    print(f"| {name} | {n} | {policy} | {rule} | {predicted:.2f} | {measured:.2f} | "
                          f"{measured / predicted - 1:+.1%} | {os.getloadavg()[0]:.2f} |", flush=True)

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="N up to 4 only")
    ap.add_argument("--measure", type=lambda t: [int(x) for x in t.split(",")], metavar="N,N",
                    help="also measure both policies on the runtime at these N (skips the prediction table)")
    ap.add_argument("--window", type=float, default=8.0, help="--measure: seconds per window")
    ap.add_argument("--warmup", type=float, default=1.0, help="--measure: seconds before each window")
    args = ap.parse_args()
    if args.measure:
        asyncio.run(measure(args.measure, args.window, args.warmup))
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print("| setting | N | best B | thresholds tok/s | local tok/s | optimal tok/s | optimal gap | states | time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (kind, rates, lat, quantum, max_n) in SETTINGS.items():
        for n in range(2, (4 if args.quick else max_n) + 1):
            spec = SystemSpec.build(*preset(kind, **rates), lat, quantum, max_concurrency=n)
            start = time.perf_counter()
            r = compare(spec, n)
            local = f"{r.local_tok_s:.2f}" + ("" if r.local_exhaustive else " (search)")
            print(f"| {name} | {n} | {list(r.thresholds)} | {r.thresholds_tok_s:.2f} | {local} | "
                  f"{r.optimal_tok_s:.2f} | {100 * r.gap:+.2f}% | {r.num_states} | "
                  f"{time.perf_counter() - start:.1f} s |", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
