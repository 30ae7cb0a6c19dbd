"""Host time per decode step: our sglang engine against SGLang's own scheduler, on the same ModelRunner.

Both run SGLang 0.5.23's ModelRunner on this CPU (torch_native attention, float32) over the same small random
model (hidden 64: the forward is cheap, so what differs is the host work around it): `ours` is the sglang engine
(tokenrouter/engine/sglang_engine.py) stepping B one-token decodes, as a subserver does; `sglang` is
`sglang.Engine` (its scheduler process, tokenizer skipped, radix cache off like ours) generating for B requests
at once: its decode step time is (T(M2) - T(M1)) / (M2 - M1) for two output lengths, which cancels prefill and
request overheads. Each measurement runs in a fresh process (SGLang keeps process-wide state), the two
alternate per batch size, each process gets the same thread count; the load average is printed.

    .venv-sglang/bin/python benchmarks/bench_sglang_host.py [--batch-sizes 1,8,64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONTEXT = 64  # prompt tokens per request
M1, M2 = 8, 40  # sglang: two output lengths; ours: decode steps timed after M1 warm-up steps


def ours(model: str, b: int, threads: int) -> float:
    """Median ms of one decode step of b requests on the sglang engine."""
    from tokenrouter.config import ModelSpec
    from tokenrouter.engine.base import StepItem
    from tokenrouter.engine.factory import build_engine

    engine = build_engine(ModelSpec(name="m", source=model, engine="sglang", kv_tokens=b * (CONTEXT + M2 + 8),
                                    threads=threads, dtype="float32"))
    rids = [f"r{i}" for i in range(b)]
    out = engine.step([StepItem(r, [(7 * i + k) % 97 + 1 for k in range(CONTEXT)]) for i, r in enumerate(rids)])
    last = list(out.next_tokens)
    times = []
    for _ in range(M2):
        t0 = time.perf_counter()
        out = engine.step([StepItem(r, [t]) for r, t in zip(rids, last, strict=True)], frozenset())
        times.append(time.perf_counter() - t0)
        last = list(out.next_tokens)
    engine.close()
    return 1e3 * statistics.median(times[M1:])


def theirs(model: str, b: int, threads: int) -> float:
    """ms per decode step of SGLang's scheduler generating for b requests at once."""
    import sglang

    engine = sglang.Engine(model_path=model, device="cpu", attention_backend="torch_native", dtype="float32",
                           skip_tokenizer_init=True, disable_radix_cache=True, random_seed=0, log_level="error",
                           max_total_tokens=b * (CONTEXT + M2 + 8), max_running_requests=max(b, 1))
    prompts = [[(7 * i + k) % 97 + 1 for k in range(CONTEXT)] for i in range(b)]

    def run(m: int) -> float:
        params = {"max_new_tokens": m, "temperature": 0.0, "ignore_eos": True}
        t0 = time.perf_counter()
        engine.generate(input_ids=prompts, sampling_params=params)
        return time.perf_counter() - t0

    try:
        run(M1)  # warm-up
        short = min(run(M1) for _ in range(3))
        long = min(run(M2) for _ in range(3))
    finally:
        engine.shutdown()
    return 1e3 * (long - short) / (M2 - M1)


def measure(which: str, model: str, b: int, threads: int) -> float:
    from tokenrouter.engine.sglang_engine import CPU_SHIM

    # SGLang's CPU rotary path imports vllm (never called): the stand-in on the path of both processes
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(CPU_SHIM)}
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_sglang_host as b; "
            f"print('RESULT', b.{which}({model!r}, {b}, {threads}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{which} at batch {b} failed:\n{done.stderr[-3000:]}")
    return float(lines[-1].split()[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-sizes", default="1,8,64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    from tokenrouter.models.tiny_random import save_random_decoder

    with tempfile.TemporaryDirectory() as tmp:
        model = str(save_random_decoder(Path(tmp), "qwen3", seed=7))
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, "
              f"{args.threads} thread(s) per process, context {CONTEXT}")
        print(f"{'batch':>5} {'ours ms':>9} {'sglang ms':>10} {'ours/sglang':>12}  per-round ours/sglang")
        rows = {}
        for b in (int(x) for x in args.batch_sizes.split(",")):
            got: dict[str, list[float]] = {"ours": [], "theirs": []}
            for k in range(args.rounds):
                for which in (("ours", "theirs") if k % 2 == 0 else ("theirs", "ours")):
                    got[which].append(measure(which, model, b, args.threads))
            o, t = statistics.median(got["ours"]), statistics.median(got["theirs"])
            ratios = " ".join(f"{a / c:.2f}" for a, c in zip(got["ours"], got["theirs"], strict=True))
            print(f"{b:>5} {o:>9.3f} {t:>10.3f} {o / t:>12.2f}  {ratios}", flush=True)
            rows[b] = {"ours_ms": got["ours"], "sglang_ms": got["theirs"]}
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
