"""`tokenrouter train-router`: train an R2R / CITER / Co-LLM router for a local model pair (see
tokenrouter/algorithms/training.py for the pipeline and how its labels simplify the official ones)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.cli.hydra_config import compose
from tokenrouter.errors import UserError

HELP = "train a token router (r2r | citer | co_llm) for a model pair on a workload's prompts"


def _parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="tokenrouter train-router",
        description=(
            "Runs the large model greedily over the workload's prompts, lets the small model predict every "
            "position of those answers (teacher-forced), labels positions where the small model's greedy token "
            "differs from the large model's, trains the router (class-balanced BCE), picks the threshold for a "
            "target recall on held-out problems and saves safetensors + JSON. Prints a JSON summary."
        ),
        epilog="example: tokenrouter train-router --algorithm r2r models=tiny workload=arith workload.limit=200",
    )
    p.add_argument("--algorithm", required=True, choices=["r2r", "citer", "co_llm"])
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default: <cache>/routers/<models.name>/<algorithm>)")
    p.add_argument("--seed", type=int, default=0, help="training seed (split, init, data order)")
    p.add_argument("--workload-seed", type=int, default=None,
                   help="seed of generated workloads' prompts (default: 1000 + --seed, apart from benchmark seeds)")
    p.add_argument("--target-recall", type=float, default=0.9, help="fraction of mismatches the threshold catches")
    p.add_argument("--holdout", type=float, default=0.25, help="fraction of problems held out")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--width", type=int, default=None, help="router width (default: min(1024, 4 * hidden size))")
    p.add_argument("--blocks", type=int, default=6, help="r2r residual blocks (official: 6)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="cap on the large model's answer length")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. models=tiny workload=arith")
    return p


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from tokenrouter.algorithms.training import TrainSettings, train_router
    from tokenrouter.cache import cache_dir
    from tokenrouter.config import model_specs
    from tokenrouter.engine.loader import load_tokenizer
    from tokenrouter.evals.workloads import encode_problem, load_workload

    settings = TrainSettings(
        algorithm=args.algorithm, seed=args.seed, target_recall=args.target_recall, holdout=args.holdout,
        epochs=args.epochs, lr=args.lr, width=args.width, blocks=args.blocks, max_new_tokens=args.max_new_tokens,
    )
    cfg = compose(list(args.overrides))
    specs = model_specs(cfg.models)
    if len(specs) != 2 or any(s.engine != "torch" for s in specs):
        raise UserError("train-router: needs a pair of torch models (small first, large second)")
    small, large = specs
    workload_seed = 1000 + args.seed if args.workload_seed is None else args.workload_seed
    workload = load_workload(cfg.workload, seed=workload_seed)
    tokenizer = load_tokenizer(small.source)
    prompts = [encode_problem(p, tokenizer) for p in workload.problems]
    models_name = str(cfg.models.get("name") or f"{small.name}+{large.name}")
    out = args.out or cache_dir() / "routers" / models_name / args.algorithm
    report = train_router(
        small, large, prompts, workload.max_new_tokens, settings, out,
        provenance={"workload": workload.name, "workload_seed": workload_seed, "models_config": models_name},
        progress=lambda msg: print(f"train-router: {msg}", file=sys.stderr, flush=True),
    )
    summary = {
        "router": str(out),
        "threshold": report.threshold,
        # the figures; long lists (held-out score quantiles) stay in the router's JSON sidecar
        **{k: v for k, v in report.metrics.items() if not (isinstance(v, list) and len(v) > 8)},
        "labels": report.labels,
        "use_with": f"algorithm={args.algorithm} algorithm.router={out}",
    }
    print(json.dumps(summary, indent=2))
    return 0
