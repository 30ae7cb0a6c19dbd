"""`tokenrouter profile`: measure a model's step latency per batch size, for the sim engine and the
throughput model (the JSON format is documented in tokenrouter/engine/latency.py).

Decode latency: B requests each holding --context tokens of KV decode one token per step; the median over
--steps timed steps (after warm-up). Extend cost: a one-request step appending --extend-tokens tokens, minus a
one-token step at the same context, divided by the extra tokens.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from tokenrouter.cli.args import ArgumentParser, int_list
from tokenrouter.cli.engine_opts import add_engine_args, engine_from_args
from tokenrouter.engine.base import Engine, StepItem
from tokenrouter.errors import UserError

HELP = "measure decode-step latency per batch size and extend cost per token (JSON for sim / perfmodel)"
WARMUP = 2


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter profile", description=HELP + ".")
    add_engine_args(p)
    p.add_argument("--batch-sizes", type=int_list, default=[1, 2, 4, 8, 16],
                   help="comma-separated batch sizes (default: 1,2,4,8,16)")
    p.add_argument("--context", type=int, default=256, help="KV tokens per request while decoding (default: 256)")
    p.add_argument("--steps", type=int, default=10, help="timed decode steps per batch size (default: 10)")
    p.add_argument("--extend-tokens", type=int, default=64, help="tokens in the timed extend step (default: 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random context tokens (default: 0)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON instead of a table")
    p.add_argument("--output", type=Path, help="also write the profile JSON to this file")
    return p


def _timed_step(engine: Engine, items: list[StepItem]) -> float:
    """Wall milliseconds of one step (CUDA work included)."""
    sync = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    engine.step(items)
    sync()
    return (time.perf_counter() - t0) * 1e3


def measure(engine: Engine, batch_sizes: list[int], context: int, steps: int, extend_tokens: int,
            seed: int = 0) -> tuple[dict[str, float], float]:
    """(decode ms per batch size, extend ms per extra token)."""
    rng = random.Random(seed)
    vocab = engine.vocab_size

    def prefill(rids: list[str]) -> None:
        for rid in rids:  # one request per step keeps prefill memory small
            engine.step([StepItem(rid, [rng.randrange(vocab) for _ in range(context)])])

    decode_ms: dict[str, float] = {}
    for b in batch_sizes:
        rids = [f"p{i}" for i in range(b)]
        prefill(rids)
        times = []
        for s in range(WARMUP + steps):
            ms = _timed_step(engine, [StepItem(r, [rng.randrange(vocab)]) for r in rids])
            if s >= WARMUP:
                times.append(ms)
        decode_ms[str(b)] = round(statistics.median(times), 4)
        for r in rids:
            engine.release(r)
    prefill(["x"])
    ext, one = [], []
    for s in range(WARMUP + max(3, steps // 2)):
        t_ext = _timed_step(engine, [StepItem("x", [rng.randrange(vocab) for _ in range(extend_tokens)])])
        engine.truncate("x", context)
        t_one = _timed_step(engine, [StepItem("x", [rng.randrange(vocab)])])
        engine.truncate("x", context)
        if s >= WARMUP:
            ext.append(t_ext)
            one.append(t_one)
    engine.release("x")
    per_token = max(0.0, (statistics.median(ext) - statistics.median(one)) / (extend_tokens - 1))
    return decode_ms, round(per_token, 5)


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if min(args.batch_sizes) < 1 or args.context < 1 or args.steps < 1 or args.extend_tokens < 2:
        raise UserError("need batch sizes >= 1, --context >= 1, --steps >= 1 and --extend-tokens >= 2")
    needed = max(args.batch_sizes) * (args.context + WARMUP + args.steps + args.page_size)
    needed = max(needed, args.context + args.extend_tokens + args.page_size)
    if args.kv_tokens < needed:
        args.kv_tokens = needed  # the profile sizes its own pool; the flag only raises it
    engine = engine_from_args(args)
    decode_ms, per_token = measure(engine, sorted(set(args.batch_sizes)), args.context, args.steps,
                                   args.extend_tokens, args.seed)
    profile: dict[str, Any] = {
        "model": args.model,
        "device": str(engine.device),
        "dtype": args.dtype,
        "context": args.context,
        "decode_ms": decode_ms,
        "extend_ms_per_token": per_token,
    }
    engine.close()
    text = json.dumps(profile, indent=2)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        print(f"{args.model} on {profile['device']} ({args.dtype}), context {args.context}")
        print(f"{'batch':>6} {'decode ms':>10} {'tokens/s':>10}")
        for b, ms in decode_ms.items():
            print(f"{b:>6} {ms:>10.3f} {int(b) * 1e3 / ms:>10.1f}")
        print(f"extend: {per_token:.4f} ms per extra token")
    return 0
