"""Std. Serving's per-token bookkeeping cost, the figure the paper reports (37.2 ms per small-model step, of
which 1.56 ms model inference), and its throughput next to TokenRouter's on the same requests.

Std. Serving runs one `tokenrouter serve` subprocess per model and asks the current model's server for ONE
token per HTTP request (the whole prefix resent; the server's prefix cache turns it into an extend). For
every dispatcher step it records the whole step, the HTTP round trip and the server's own handling time;
the server reports its engine's busy time per step (the model step). The rest is bookkeeping.

    .venv/bin/python benchmarks/bench_std_serving.py [--models tiny-random|sim] [--concurrency 4]
        [--requests 8] [--prompt-tokens 64] [--max-new-tokens 64] [--route-prob 0.35]
        [--prefix-cache-tokens 262144] [--compare]

Timings need an otherwise idle machine (sim engines sleep and spin; CPU contention adds latency).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from tokenrouter.baselines.std_serving import StdServingOptions, StdServingSystem
from tokenrouter.config import AlgorithmSpec, RuntimeConfig, model_specs
from tokenrouter.generation import GenerationRequest

MODELS = {
    "tiny-random": [{"name": "small", "source": "tiny-random:small"}, {"name": "large", "source": "tiny-random:large"}],
    "sim": [{"name": "small", "engine": "sim", "sim": {"latency_ms": 1.56, "vocab_size": 1000}},
            {"name": "large", "engine": "sim", "sim": {"latency_ms": 7.25, "vocab_size": 1000}}],
}
COLUMNS = [("dispatch", "step"), ("http_round_trip", "HTTP rt"), ("server_handling", "server"),
           ("model_step", "model"), ("server_bookkeeping", "srv other"), ("client_http_json", "client"),
           ("dispatcher_routing", "routing")]


async def drive(system, reqs: list[GenerationRequest], clients: int) -> tuple[float, int]:
    """Closed loop: `clients` clients, each sends its next request when the last one finished."""
    todo = iter(reqs)
    tokens = 0

    async def client() -> None:
        nonlocal tokens
        for req in todo:
            n = len((await system.generate(req)).output_ids)  # (not `tokens += await ...`: lost updates)
            tokens += n

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - start, tokens


def report(stats: dict) -> None:
    print("per dispatcher step, ms (mean over steps; 'model' = the server engine's busy time per step)")
    print(f"{'model':<8}{'steps':>7}" + "".join(f"{title:>10}" for _, title in COLUMNS) + f"{'model %':>9}")
    for name, m in stats["models"].items():
        cost = m["per_token_ms"] or {}
        cells = "".join(f"{cost.get(key, float('nan')):10.2f}" for key, _ in COLUMNS)
        share = 100 * cost.get("model_step_share", float("nan"))
        print(f"{name:<8}{m['steps']:>7}{cells}{share:8.1f}%")


async def main(args: argparse.Namespace) -> None:
    specs = model_specs({"members": MODELS[args.models]})
    algo = AlgorithmSpec("bernoulli", {"route_prob": args.route_prob})
    runtime = RuntimeConfig(thresholds=[1, 1])
    rng = random.Random(0)
    vocab = 90 if args.models == "tiny-random" else 1000
    reqs = [GenerationRequest([rng.randrange(4, vocab) for _ in range(args.prompt_tokens)],
                              max_new_tokens=args.max_new_tokens, seed=i, index=i, stop_token_ids=[])
            for i in range(args.requests)]  # no stop tokens: every request generates exactly max_new_tokens
    opts = StdServingOptions(prefix_cache_tokens=args.prefix_cache_tokens)
    async with StdServingSystem(specs, algo, runtime, options=opts) as std:
        await drive(std, reqs[:1], 1)  # warm-up (first steps, lazy imports), not measured
        std.reset_stats()
        elapsed, tokens = await drive(std, reqs, args.concurrency)
        stats = std.stats()
    print(f"Std. Serving: models={args.models} N={args.concurrency} requests={args.requests} "
          f"prompt={args.prompt_tokens} new={args.max_new_tokens} prefix_cache_tokens={args.prefix_cache_tokens}")
    report(stats)
    print(f"throughput: {tokens / elapsed:.1f} tok/s ({tokens} tokens in {elapsed:.2f} s)")
    if args.compare:
        from tokenrouter.runtime.frontend import TokenRouterFrontend

        async with TokenRouterFrontend(specs, algo, runtime) as router:
            await drive(router, reqs[:1], 1)
            tr_elapsed, tr_tokens = await drive(router, reqs, args.concurrency)
        print(f"TokenRouter:  {tr_tokens / tr_elapsed:.1f} tok/s ({tr_tokens} tokens in {tr_elapsed:.2f} s); "
              f"speed-up {(tr_tokens / tr_elapsed) / (tokens / elapsed):.2f}x")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", choices=sorted(MODELS), default="tiny-random")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--route-prob", type=float, default=0.35)
    p.add_argument("--prefix-cache-tokens", type=int, default=1 << 18)
    p.add_argument("--compare", action="store_true", help="also run TokenRouter on the same requests")
    asyncio.run(main(p.parse_args()))
