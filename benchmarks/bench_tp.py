"""Step latency of the torch engine at TP 1 and TP 2, same model, side by side in one run.

Decode at each batch size and the per-token cost of an extend, measured with the same code the start-up
profiles use (tokenrouter/engine/profiling.py `measure`). On a CPU the TP 2 ranks share the host's cores and
add an all-reduce per layer, so expect TP 2 to be slower there; the figure to read on a GPU is the ratio.

    .venv/bin/python benchmarks/bench_tp.py [--model tiny:large] [--batch-sizes 1,8,16] [--device cpu]
"""

from __future__ import annotations

import argparse
import os

from tokenrouter.config import ModelSpec
from tokenrouter.engine.factory import build_engine
from tokenrouter.engine.profiling import kv_needed, measure


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny:large", help="model source (default: the local pair's large model)")
    p.add_argument("--batch-sizes", default="1,8,16")
    p.add_argument("--tp", default="1,2", help="TP sizes to compare (default: 1,2)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default: 1)")
    p.add_argument("--context", type=int, default=64, help="tokens in each request's KV (default: 64)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--extend", type=int, default=8, help="tokens of the extend step (default: 8)")
    args = p.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    kv = kv_needed(batches, args.context, args.steps, args.extend, 16)
    rows = {}
    for tp in [int(t) for t in args.tp.split(",")]:
        spec = ModelSpec(name=f"tp{tp}", source=args.model, engine="torch", device=args.device,
                         threads=args.threads, kv_tokens=kv, tp=tp)
        engine = build_engine(spec)
        try:
            measured = measure(engine, batches, [args.context], args.steps, args.extend)
            rows[tp] = (measured.decode_ms, measured.extend_ms_per_token)
        finally:
            engine.close()
    print(f"model {args.model}, device {args.device}, {args.threads} thread(s) per rank, context {args.context}; "
          f"load average {os.getloadavg()[0]:.2f}")
    head = " | ".join(f"decode b={b} ms" for b in batches)
    print(f"| TP | {head} | extend ms/token |")
    print("|---|" + "---|" * (len(batches) + 1))
    for tp, (decode, per_token) in rows.items():
        print(f"| {tp} | " + " | ".join(f"{decode[str(b)]:.2f}" for b in batches) + f" | {per_token:.3f} |")
    base = rows[min(rows)][0]
    for tp, (decode, _) in rows.items():
        if tp != min(rows):
            ratios = ", ".join(f"b={b}: {decode[str(b)] / base[str(b)]:.2f}x" for b in batches)
            print(f"TP {tp} / TP {min(rows)} step time: {ratios}")


if __name__ == "__main__":
    main()
