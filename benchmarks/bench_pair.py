"""The local pair's figures through the project's torch engine: held-out `arith` accuracy (greedy) and the
decode-step latency at batch 1 of each member, plus the large/small ratios the routing demo relies on.

    .venv/bin/python benchmarks/bench_pair.py [--problems 200] [--seed 0] [--threads 1] [--steps 50]
"""

from __future__ import annotations

import argparse
import json

import torch
from omegaconf import OmegaConf

from evals.workloads import encode_problem, load_workload
from tokenrouter.config import ModelSpec
from tokenrouter.engine.continuous import Job, run_batch
from tokenrouter.engine.profiling import measure
from tokenrouter.engine.torch_engine import TorchEngine
from tokenrouter.models.pair import MEMBERS, committed_dir
from tokenrouter.tasks.grading import is_correct

CONF = committed_dir().parents[1] / "conf" / "workload" / "arith.yaml"


def member_figures(name: str, problems: int, seed: int, threads: int, steps: int) -> dict:
    engine = TorchEngine.from_spec(ModelSpec(name=name, source=f"tiny:{name}", threads=threads, kv_tokens=16384))
    workload = load_workload(OmegaConf.merge(OmegaConf.load(CONF), {"limit": problems}), seed=seed)
    jobs = [Job(encode_problem(p, engine.tokenizer), workload.max_new_tokens, stop_ids=engine.eos_token_ids)
            for p in workload.problems]
    correct = 0
    for done in run_batch(engine, jobs, max_batch_size=64):
        text = engine.tokenizer.decode(done.output_ids, skip_special_tokens=True)
        correct += is_correct(text, workload.problems[done.index].answer)
    decode_ms = measure(engine, [1], [64], steps=steps, extend_tokens=16).decode_ms
    engine.close()
    params = sum(p.numel() for p in engine.model.parameters())
    return {"params": params, "accuracy": correct / len(jobs), "decode_ms_b1": decode_ms["1"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=200, help="held-out problems graded per model")
    p.add_argument("--seed", type=int, default=0, help="workload seed (the pair never trains on these problems)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=50, help="timed decode steps at batch 1")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    figures = {name: member_figures(name, args.problems, args.seed, args.threads, args.steps) for name in MEMBERS}
    for name, f in figures.items():
        print(f"{name:>6}: {f['params'] / 1e6:6.2f} M params  accuracy {f['accuracy']:6.1%}  "
              f"decode step at batch 1 {f['decode_ms_b1']:7.3f} ms")
    small, large = figures["small"], figures["large"]
    print(f"large - small accuracy: {100 * (large['accuracy'] - small['accuracy']):+.1f} points; "
          f"large / small step latency: {large['decode_ms_b1'] / small['decode_ms_b1']:.2f}x")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
