"""Decode throughput of the torch engine vs transformers' `generate`, same model, same batch sizes.

A random Qwen3 (hidden 256 by default, big enough that compute, not Python overhead, shows) decodes
--new-tokens tokens for B prompts of --prompt-len tokens. Engine: the decode steps are timed (prefill
excluded). HF: generate(N) minus generate(1) on the same batch, so both figures are decode-only tokens/s.

    .venv/bin/python benchmarks/bench_engine.py [--batch-sizes 1,4,16] [--threads 1] [--device cpu]
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from tokenrouter.engine.base import StepItem
from tokenrouter.engine.torch_engine import TorchEngine


def build(hidden: int, layers: int, vocab: int, device: str, dtype: torch.dtype) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 32, num_key_value_heads=max(1, hidden // 128), head_dim=32,
                      max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=None, pad_token_id=0)
    return Qwen3ForCausalLM(cfg).to(device=device, dtype=dtype).eval()


CLOCK = time.perf_counter


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def engine_rate(engine: TorchEngine, prompts: list[list[int]], new: int, device: str) -> float:
    out = engine.step([StepItem(str(i), p) for i, p in enumerate(prompts)])
    last = out.next_tokens
    _sync(device)
    t0 = CLOCK()
    for _ in range(new - 1):
        out = engine.step([StepItem(str(i), [t]) for i, t in enumerate(last)])
        last = out.next_tokens
    _sync(device)
    elapsed = CLOCK() - t0
    for i in range(len(prompts)):
        engine.release(str(i))
    return len(prompts) * (new - 1) / elapsed


def hf_rate(model: Qwen3ForCausalLM, prompts: list[list[int]], new: int, device: str) -> float:
    ids = torch.tensor(prompts, device=device)
    mask = torch.ones_like(ids)

    def run(n: int) -> float:
        _sync(device)
        t0 = CLOCK()
        with torch.inference_mode():
            model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        _sync(device)
        return CLOCK() - t0

    return len(prompts) * (new - 1) / max(1e-9, run(new) - run(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=3, help="best of N runs per cell (noisy shared machines)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's CPU time (fairer on a shared, overloaded CPU machine; 1 thread)")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    hf_model = build(args.hidden, args.layers, args.vocab, args.device, dtype)
    engine = TorchEngine(build(args.hidden, args.layers, args.vocab, args.device, dtype),
                         kv_tokens=max(sizes) * (args.prompt_len + args.new_tokens + 16))
    gen = torch.Generator().manual_seed(0)
    rows = []
    for b in sizes:
        prompts = torch.randint(1, args.vocab, (b, args.prompt_len), generator=gen).tolist()
        ours = max(engine_rate(engine, prompts, args.new_tokens, args.device) for _ in range(args.repeats))
        ref = max(hf_rate(hf_model, prompts, args.new_tokens, args.device) for _ in range(args.repeats))
        rows.append((b, ours, ref))
    print(f"Qwen3 hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, {args.device} {args.dtype}, "
          f"{args.threads} thread(s), prompt {args.prompt_len}, {args.new_tokens} new tokens, {args.clock} clock")
    print(f"{'batch':>5} {'engine tok/s':>13} {'HF generate tok/s':>18} {'engine/HF':>10} {'engine vs b=1':>14}")
    for b, ours, ref in rows:
        print(f"{b:>5} {ours:>13.1f} {ref:>18.1f} {ours / ref:>10.2f} {ours / rows[0][1]:>13.1f}x")


if __name__ == "__main__":
    main()
