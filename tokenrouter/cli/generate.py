"""`tokenrouter generate`: batched generation with one model engine (continuous batching).

All prompts are submitted at once; up to --max-batch-size run together and waiting ones join as others
finish. With --json, one JSON line per prompt in input order, each printed as soon as it and every earlier
prompt are done.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.cli.engine_opts import add_engine_args, engine_from_args
from tokenrouter.engine.base import SamplingParams
from tokenrouter.engine.continuous import Job, run_batch
from tokenrouter.errors import UserError
from tokenrouter.jsonl import numbered_json_objects

HELP = "generate completions for prompts with one model (continuous batching)"


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter generate", description=HELP + ".")
    add_engine_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", help="prompt text (repeat for several prompts)")
    src.add_argument("--prompts-file", type=Path,
                     help='JSON lines, each with "prompt" (text) or "input_ids" (token ids)')
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt (default: 64)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: 1.0)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k best tokens (default: 0 = all)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed; prompt i uses seed + i (default: 0)")
    p.add_argument("--chat", action="store_true", help="wrap text prompts in the model's chat template")
    p.add_argument("--max-batch-size", type=int, default=64, help="most requests per step (default: 64)")
    p.add_argument("--json", action="store_true", help="one JSON line per prompt, in input order")
    return p


def _read_prompts(args: Any) -> list[str | list[int]]:
    if args.prompt is not None:
        return list(args.prompt)
    path: Path = args.prompts_file
    if not path.is_file():
        raise UserError(f"prompts file not found: {path}")
    prompts: list[str | list[int]] = []
    for n, row in numbered_json_objects(path):
        if isinstance(row.get("prompt"), str):
            prompts.append(row["prompt"])
        elif isinstance(row.get("input_ids"), list) and all(
            isinstance(t, int) for t in row["input_ids"]
        ):
            prompts.append(list(row["input_ids"]))
        else:
            raise UserError(f'{path}:{n}: expected an object with "prompt" (text) or "input_ids" (list of ints)')
    if not prompts:
        raise UserError(f"{path}: no prompts")
    return prompts


def _encode(prompt: str | list[int], tokenizer: Any, chat: bool, vocab_size: int) -> list[int]:
    if isinstance(prompt, list):
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise UserError(f"input_ids {bad[:3]} out of range for a vocabulary of {vocab_size}")
        return prompt
    if tokenizer is None:
        raise UserError("this model has no tokenizer; give input_ids instead of text prompts")
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise UserError("--chat: the model's tokenizer has no chat template")
        return list(tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                  add_generation_prompt=True, return_dict=False))
    return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.max_new_tokens < 1 or args.max_batch_size < 1:
        raise UserError("--max-new-tokens and --max-batch-size must be >= 1")
    if args.temperature < 0 or not 0 < args.top_p <= 1 or args.top_k < 0:
        raise UserError("need --temperature >= 0, 0 < --top-p <= 1 and --top-k >= 0")
    prompts = _read_prompts(args)
    engine = engine_from_args(args)
    try:  # close() also stops tensor-parallel ranks
        tok = getattr(engine, "tokenizer", None)
        jobs = [
            Job(_encode(p, tok, args.chat, engine.vocab_size), args.max_new_tokens,
                SamplingParams(args.temperature, args.top_p, args.top_k, seed=args.seed + i), engine.eos_token_ids)
            for i, p in enumerate(prompts)
        ]
        done: dict[int, Any] = {}
        next_out = 0
        for fin in run_batch(engine, jobs, args.max_batch_size):
            done[fin.index] = fin
            while next_out in done:
                _print(done.pop(next_out), tok, args.json)
                next_out += 1
    finally:
        engine.close()
    return 0


def _print(fin: Any, tokenizer: Any, as_json: bool) -> None:
    text = tokenizer.decode(fin.output_ids, skip_special_tokens=True) if tokenizer is not None else None
    if as_json:
        row = {"index": fin.index, "output_ids": fin.output_ids, "text": text, "finish_reason": fin.finish_reason}
        print(json.dumps(row), flush=True)
    else:
        shown = text if text is not None else " ".join(map(str, fin.output_ids))
        print(f"[{fin.index}] ({fin.finish_reason}, {len(fin.output_ids)} tokens) {shown}", flush=True)
