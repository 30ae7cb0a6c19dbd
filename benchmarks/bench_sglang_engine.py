"""Step latency of the sglang engine vs the torch engine on the same random model, side by side in one run.

Per batch size B: `decode` is one step of B one-token decodes (SGLang ForwardMode.DECODE); `mixed` is one
step where half the requests decode and half resume with an --extend-tokens extend (ForwardMode.EXTEND, what
a hand-off return looks like). Every request holds --context tokens; after each timed step the engines are
truncated back, so all timed steps see the same KV. Engines alternate per batch size so that load drift on a
shared machine hits both; the load average is printed before and after. Needs SGLang (.venv-sglang):

    .venv-sglang/bin/python benchmarks/bench_sglang_engine.py [--batch-sizes 1,8,16] [--hidden 256] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import warnings

import torch

from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import Engine, StepItem
from tokenrouter.engine.factory import build_engine
from tokenrouter.models.tiny_random import save_random_decoder

WARMUP = 3


def _timed(engine: Engine, items: list[StepItem]) -> float:
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    engine.step(items)
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def step_ms(engine: Engine, b: int, context: int, extend: int, steps: int, seed: int) -> tuple[float, float]:
    """(median decode step ms, median mixed step ms) at batch size b."""
    rng = random.Random(seed)
    vocab = engine.vocab_size
    rids = [f"b{b}-{i}" for i in range(b)]
    for r in rids:
        engine.step([StepItem(r, [rng.randrange(vocab) for _ in range(context)])])
    decode, mixed = [], []
    for s in range(WARMUP + steps):
        t = _timed(engine, [StepItem(r, [rng.randrange(vocab)]) for r in rids])
        for r in rids:
            engine.truncate(r, context)
        n = [1 if i % 2 == 0 else extend for i in range(b)] if b > 1 else [extend]  # b=1: one extend
        u = _timed(engine, [StepItem(r, [rng.randrange(vocab) for _ in range(k)]) for r, k in zip(rids, n, strict=True)])
        for r in rids:
            engine.truncate(r, context)
        if s >= WARMUP:
            decode.append(t)
            mixed.append(u)
    for r in rids:
        engine.release(r)
    return statistics.median(decode), statistics.median(mixed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="1,8,16")
    ap.add_argument("--family", default="qwen3", choices=["qwen3", "llama"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--extend-tokens", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(a.threads)
    sizes = [int(x) for x in a.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = save_random_decoder(tmp, a.family, num_layers=a.layers, hidden_size=a.hidden,
                                   num_heads=a.hidden // 64, num_kv_heads=max(1, a.hidden // 256))
        kv = max(sizes) * (a.context + a.extend_tokens + 8)
        common = dict(source=str(path), device=a.device, dtype=a.dtype, threads=a.threads, kv_tokens=kv)
        engines = {"sglang": build_engine(ModelSpec(name="sglang", engine="sglang", **common)),
                   "torch": build_engine(ModelSpec(name="torch", engine="torch", **common))}
        load0 = os.getloadavg()
        rows = []
        for b in sizes:
            res = {name: step_ms(e, b, a.context, a.extend_tokens, a.steps, seed=b) for name, e in engines.items()}
            rows.append((b, res))
        load1 = os.getloadavg()
        engines["sglang"].close()
    print(f"{a.family} hidden {a.hidden} x {a.layers} layers, head_dim 64, {a.dtype} on {a.device}, "
          f"{a.threads} thread(s), context {a.context}, mixed = half decode + half {a.extend_tokens}-token extends; "
          f"median of {a.steps} steps")
    print(f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} ({os.cpu_count()} cores)")
    print(f"{'batch':>5} | {'decode ms sglang':>16} {'torch':>8} {'ratio':>6} | {'mixed ms sglang':>15} {'torch':>8} {'ratio':>6}")
    for b, res in rows:
        (sd, sm), (td, tm) = res["sglang"], res["torch"]
        print(f"{b:>5} | {sd:>16.2f} {td:>8.2f} {sd / td:>6.2f} | {sm:>15.2f} {tm:>8.2f} {sm / tm:>6.2f}")


if __name__ == "__main__":
    main()
