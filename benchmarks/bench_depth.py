"""Step time of the torch engine against depth, width, batch and extend length, plus one training step, for
random Qwen3 decoders shaped like the local pair (char tokenizer vocabulary): the physics the pair is designed on.

Why interleaved: the 2-core machine is shared, so absolute times drift with the load. Every round times one step
of every (shape, kind) cell in turn, so a slow spell hits all cells alike and the ratios stay valid; medians over
rounds. Times are wall milliseconds at --threads torch threads; the load average is printed alongside.

    .venv/bin/python benchmarks/bench_depth.py [--shapes 1x96,8x128,24x128] [--rounds 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

import torch

from tokenrouter.engine.base import StepItem
from tokenrouter.engine.torch_engine import TorchEngine
from tokenrouter.models.pair import MemberRecipe, qwen3_config
from tokenrouter.models.tokenizer import build_char_tokenizer

CONTEXT = 64  # tokens already in the KV when a decode / extend step is timed (about an arith prompt)
TRAIN_BATCH, TRAIN_LEN = 32, 96  # one make-pair training step: batch x sequence length


def parse_shape(text: str) -> tuple[int, int]:
    layers, hidden = text.lower().split("x")
    return int(layers), int(hidden)


def build(layers: int, hidden: int, tokenizer) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    heads = max(1, hidden // 32)
    recipe = MemberRecipe(hidden=hidden, layers=layers, heads=heads, intermediate=3 * hidden, steps=1, lr=1e-3)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(qwen3_config(recipe, tokenizer), attn_implementation="sdpa").eval()


def step_cells(engine: TorchEngine, extend: list[int], rng: random.Random) -> dict[str, Callable[[], None]]:
    """One callable per timed kind; each leaves the KV at CONTEXT tokens per request."""
    vocab = engine.vocab_size
    rids = [f"r{i}" for i in range(8)]
    for r in rids:
        engine.step([StepItem(r, [rng.randrange(vocab) for _ in range(CONTEXT)])])

    def decode(batch: int) -> Callable[[], None]:
        def run() -> None:
            engine.step([StepItem(r, [rng.randrange(vocab)]) for r in rids[:batch]])
            for r in rids[:batch]:
                engine.truncate(r, CONTEXT)
        return run

    def extend_step(tokens: int) -> Callable[[], None]:
        def run() -> None:
            engine.step([StepItem(rids[0], [rng.randrange(vocab) for _ in range(tokens)])])
            engine.truncate(rids[0], CONTEXT)
        return run

    cells = {"decode b1": decode(1), "decode b8": decode(8)}
    cells.update({f"extend {n}": extend_step(n) for n in extend})
    return cells


def train_cell(layers: int, hidden: int, tokenizer) -> Callable[[], None]:
    """One AdamW step on a TRAIN_BATCH x TRAIN_LEN batch (what a make-pair step costs at this shape)."""
    model = build(layers, hidden, tokenizer).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, len(tokenizer), (TRAIN_BATCH, TRAIN_LEN), generator=torch.Generator().manual_seed(0))

    def run() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x96,1x256,2x128,4x128,8x128,16x128,24x64,24x128,32x96,16x256",
                    help="comma list of LAYERSxHIDDEN")
    ap.add_argument("--extend", default="4,16", help="extend lengths (tokens in one step at batch 1)")
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds (after 3 warm-up rounds)")
    ap.add_argument("--train-rounds", type=int, default=3, help="timed training steps per shape (0: skip)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = build_char_tokenizer()
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    rng = random.Random(0)
    cells: dict[tuple[tuple[int, int], str], Callable[[], None]] = {}
    engines = []
    with torch.inference_mode():
        for shape in shapes:
            engine = TorchEngine(build(*shape, tokenizer), kv_tokens=16 * (CONTEXT + 32))
            engines.append(engine)
            for kind, fn in step_cells(engine, [int(n) for n in args.extend.split(",")], rng).items():
                cells[(shape, kind)] = fn
        times: dict[tuple[tuple[int, int], str], list[float]] = {key: [] for key in cells}
        load_before = os.getloadavg()
        for round_ in range(3 + args.rounds):
            for key, fn in cells.items():
                t0 = time.perf_counter()
                fn()
                if round_ >= 3:
                    times[key].append(1000 * (time.perf_counter() - t0))
    train = {}
    if args.train_rounds:
        runs = {shape: train_cell(*shape, tokenizer) for shape in shapes}
        train = {shape: [] for shape in shapes}
        for round_ in range(1 + args.train_rounds):
            for shape, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                if round_:
                    train[shape].append(time.perf_counter() - t0)
    load_after = os.getloadavg()
    kinds = list(dict.fromkeys(kind for _, kind in cells))
    base = statistics.median(times[(shapes[0], "decode b1")])
    print(f"torch engine, {args.threads} thread(s), context {CONTEXT}, median of {args.rounds} interleaved rounds; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    head = f"{'shape':>8} {'params':>8} " + " ".join(f"{k + ' ms':>12}" for k in kinds)
    head += f" {'b1 / ' + 'x'.join(map(str, shapes[0])):>10} {'b8 / b1':>8}"
    print(head + (f" {'train step s':>12}" if train else ""))
    for shape, engine in zip(shapes, engines, strict=True):
        med = {k: statistics.median(times[(shape, k)]) for k in kinds}
        params = sum(p.numel() for p in engine.model.parameters())
        row = f"{'x'.join(map(str, shape)):>8} {params / 1e6:7.2f}M " + " ".join(f"{med[k]:12.2f}" for k in kinds)
        row += f" {med['decode b1'] / base:9.1f}x {med['decode b8'] / med['decode b1']:7.2f}x"
        print(row + (f" {statistics.median(train[shape]):12.3f}" if train else ""))


if __name__ == "__main__":
    main()
