"""`tokenrouter profile`: measure a model's step latency per batch size and context length, for the sim engine
and the throughput model (the JSON format is documented in tokenrouter/engine/latency.py).

Decode latency: B requests each holding C tokens of KV decode one token per step, for each C of --contexts
(default: --context alone); the median over --steps timed steps after warm-up (fewer at longer contexts,
`steps_at`). Extend cost: a one-request step appending --extend-tokens tokens, minus a one-token step at the
shortest context, divided by the extra tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenrouter.cli.args import ArgumentParser, int_list
from tokenrouter.cli.engine_opts import add_engine_args, engine_from_args
from tokenrouter.engine.profiling import kv_needed, measure, plan_contexts, profile_dict
from tokenrouter.errors import UserError
from tokenrouter.fsutil import atomic_write_text

HELP = "measure decode-step latency per batch size and extend cost per token (JSON for sim / perfmodel)"


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter profile", description=HELP + ".")
    add_engine_args(p)
    p.add_argument("--batch-sizes", type=int_list, default=[1, 2, 4, 8, 16],
                   help="comma-separated batch sizes (default: 1,2,4,8,16)")
    p.add_argument("--context", type=int, default=256, help="KV tokens per request while decoding (default: 256)")
    p.add_argument("--contexts", type=int_list, default=None,
                   help="comma-separated contexts to profile, e.g. 256,2048,8192 (default: --context alone)")
    p.add_argument("--steps", type=int, default=10, help="timed decode steps per batch size (default: 10)")
    p.add_argument("--extend-tokens", type=int, default=64, help="tokens in the timed extend step (default: 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random context tokens (default: 0)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON instead of a table")
    p.add_argument("--output", type=Path, help="also write the profile JSON to this file")
    return p


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    contexts = sorted(set(args.contexts or [args.context]))
    if min(args.batch_sizes) < 1 or min(contexts) < 1 or args.steps < 1 or args.extend_tokens < 2:
        raise UserError("need batch sizes >= 1, contexts >= 1, --steps >= 1 and --extend-tokens >= 2")
    needed = kv_needed(args.batch_sizes, contexts[-1], args.steps, args.extend_tokens, args.page_size)
    if args.kv_tokens < needed:
        args.kv_tokens = needed  # the profile sizes its own pool; the flag only raises it
    engine = engine_from_args(args)
    plan = plan_contexts(contexts, args.batch_sizes, args.steps, args.extend_tokens, engine.tokens_free(),
                         args.page_size, engine.max_positions)
    if not plan.contexts:
        engine.close()
        raise UserError(f"no context of {contexts} fits the model: {plan.skipped[contexts[0]]}")
    measured = measure(engine, sorted(set(args.batch_sizes)), plan.contexts, args.steps, args.extend_tokens,
                       args.seed)
    measured.skipped.update(plan.skipped)
    profile = profile_dict(args.model, str(engine.device), args.dtype, measured)
    engine.close()
    text = json.dumps(profile, indent=2)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.output, text + "\n")
    if args.json:
        print(text)
    else:
        print(f"{args.model} on {profile['device']} ({args.dtype})")
        print(f"{'context':>8} {'batch':>6} {'decode ms':>10} {'tokens/s':>10}")
        for c, table in measured.decode_ms_by_context.items():
            for b, ms in table.items():
                print(f"{c:>8} {b:>6} {ms:>10.3f} {int(b) * 1e3 / ms:>10.1f}")
        for c, why in sorted(measured.skipped.items()):
            print(f"context {c} skipped: {why}")
        print(f"extend: {measured.extend_ms_per_token:.4f} ms per extra token (context {measured.context})")
    return 0
