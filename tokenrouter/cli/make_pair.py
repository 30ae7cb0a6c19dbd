"""`tokenrouter make-pair`: train the local small/large model pair (`models=tiny`) on the `arith` task."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from tokenrouter.cli.args import ArgumentParser, int_list
from tokenrouter.errors import UserError

HELP = "train the local small/large model pair (models=tiny) on the arith workload"


def _parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="tokenrouter make-pair",
        description=(
            "Trains two Qwen3-style decoders with one char tokenizer on worked arith solutions (chat format), "
            "deterministically from --seed, and saves them as safetensors + config + tokenizer in DIR/small "
            "and DIR/large. models=tiny (sources tiny:small / tiny:large) loads the default pair."
        ),
        epilog="example: tokenrouter make-pair --seed 0 --eval 200",
    )
    p.add_argument("--out", type=Path, default=None,
                   help="pair directory (default: <cache>/tiny-pair for seed 0, else <cache>/tiny-pair-seed<S>)")
    p.add_argument("--seed", type=int, default=0, help="training seed: init, data stream and order (default: 0)")
    p.add_argument("--force", action="store_true", help="retrain even if DIR already holds this pair")
    p.add_argument("--steps", type=int_list, default=None, metavar="S[,L]",
                   help="training steps for small,large (one number: both); other values make a non-default pair")
    p.add_argument("--threads", type=int, default=None, help="torch threads for training (part of the recipe)")
    p.add_argument("--eval", type=int, default=200, metavar="N",
                   help="grade N held-out problems greedily after training (0: skip; default: 200)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _recipe(args: argparse.Namespace):
    from tokenrouter.models.pair import PairRecipe

    recipe = PairRecipe()
    if args.steps is not None:
        if len(args.steps) > 2 or min(args.steps) < 1:
            raise UserError("--steps: give one or two positive step counts (small,large)")
        small, large = (args.steps * 2)[:2]
        recipe = dataclasses.replace(recipe, small=dataclasses.replace(recipe.small, steps=small),
                                     large=dataclasses.replace(recipe.large, steps=large))
    if args.threads is not None:
        if args.threads < 1:
            raise UserError("--threads must be >= 1")
        recipe = dataclasses.replace(recipe, threads=args.threads)
    return recipe


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.eval < 0:
        raise UserError("--eval must be >= 0")
    from tokenrouter.models.pair import PairRecipe, build_pair, default_dir, is_built

    recipe = _recipe(args)
    if args.out is None and recipe != PairRecipe():
        raise UserError("--steps / --threads make a non-default pair: say where it goes with --out DIR")
    out = (args.out or default_dir(args.seed)).expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    if is_built(out, recipe, args.seed) and not args.force:
        print(f"pair already built in {out} (use --force to retrain)")
        return 0
    if out.exists() and any(out.iterdir()):
        if not (out / "tokenrouter_build.json").exists():
            raise UserError(f"--out {out} is a non-empty directory that holds no model pair; choose another")
        if not args.force:
            raise UserError(f"{out} holds a pair of another recipe or seed; add --force to replace it")
    metrics = build_pair(out, args.seed, recipe, eval_problems=args.eval, progress=not args.quiet)
    print(json.dumps({"out": str(out), **metrics}))
    return 0
