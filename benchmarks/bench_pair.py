"""The local pair's figures through the project's torch engine: held-out `arith` accuracy (greedy) of each
member, and its step latency (decode at batch 1 and 8, an extend of 4 tokens) timed interleaved with the other
member's (bench_depth.py's cells, one step of each in turn per round, so the large/small ratios hold on a loaded
machine; the load average is printed alongside), plus the large/small ratios the routing demo relies on.

    .venv/bin/python benchmarks/bench_pair.py [--problems 200] [--seed 0] [--threads 1] [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

import torch
from bench_depth import step_cells  # same directory: run as a script
from omegaconf import OmegaConf

from tokenrouter.config import ModelSpec
from tokenrouter.engine.continuous import Job, run_batch
from tokenrouter.engine.torch_engine import TorchEngine
from tokenrouter.evals.workloads import encode_problem, load_workload
from tokenrouter.models.pair import MEMBERS, committed_dir
from tokenrouter.tasks.grading import is_correct

CONF = committed_dir().parents[1] / "conf" / "workload" / "arith.yaml"


def accuracy(engine: TorchEngine, problems: int, seed: int) -> float:
    workload = load_workload(OmegaConf.merge(OmegaConf.load(CONF), {"limit": problems}), seed=seed)
    jobs = [Job(encode_problem(p, engine.tokenizer), workload.max_new_tokens, stop_ids=engine.eos_token_ids)
            for p in workload.problems]
    correct = 0
    for done in run_batch(engine, jobs, max_batch_size=64):
        text = engine.tokenizer.decode(done.output_ids, skip_special_tokens=True)
        correct += is_correct(text, workload.problems[done.index].answer)
    return correct / len(jobs)


def interleaved_ms(engines: dict[str, TorchEngine], rounds: int) -> dict[str, dict[str, float]]:
    """Median ms per (member, step kind), every cell timed once per round in turn (3 warm-up rounds)."""
    rng = random.Random(0)
    cells = {(name, kind): fn for name, e in engines.items() for kind, fn in step_cells(e, [4], rng).items()}
    times: dict[tuple[str, str], list[float]] = {key: [] for key in cells}
    with torch.inference_mode():
        for round_ in range(3 + rounds):
            for key, fn in cells.items():
                t0 = time.perf_counter()
                fn()
                if round_ >= 3:
                    times[key].append(1000 * (time.perf_counter() - t0))
    out: dict[str, dict[str, float]] = {name: {} for name in engines}
    for (name, kind), values in times.items():
        out[name][kind] = round(statistics.median(values), 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=200, help="held-out problems graded per model")
    p.add_argument("--seed", type=int, default=0, help="workload seed (the pair never trains on these problems)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=30, help="timed rounds of interleaved steps")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    engines = {name: TorchEngine.from_spec(ModelSpec(name=name, source=f"tiny:{name}", threads=args.threads,
                                                     kv_tokens=16384)) for name in MEMBERS}
    figures = {name: {"params": sum(p.numel() for p in e.model.parameters()),
                      "accuracy": accuracy(e, args.problems, args.seed)} for name, e in engines.items()}
    load = os.getloadavg()[0]
    for name, ms in interleaved_ms(engines, args.rounds).items():
        figures[name]["step_ms"] = ms
    print(f"{args.threads} thread(s), {args.rounds} interleaved rounds, load average {load:.2f} before timing, "
          f"{os.getloadavg()[0]:.2f} after")
    for name, f in figures.items():
        steps = "  ".join(f"{kind} {ms:7.2f} ms" for kind, ms in f["step_ms"].items())
        print(f"{name:>6}: {f['params'] / 1e6:6.2f} M params  accuracy {f['accuracy']:6.1%}  {steps}")
    small, large = figures["small"], figures["large"]
    ratios = {kind: round(large["step_ms"][kind] / small["step_ms"][kind], 2) for kind in small["step_ms"]}
    print(f"large - small accuracy: {100 * (large['accuracy'] - small['accuracy']):+.1f} points; "
          "large / small step latency: " + ", ".join(f"{kind} {r:.1f}x" for kind, r in ratios.items()))
    for engine in engines.values():
        engine.close()
    print(json.dumps({**figures, "ratios": ratios, "load_average": load}))


if __name__ == "__main__":
    main()
