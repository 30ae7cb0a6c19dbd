"""The trained local model pair (`tiny:small`, `tiny:large`): two Qwen3-style decoders taught the `arith` task.

Why: on a machine without GPUs or the Hub, routing still needs two models that share a tokenizer, differ in
quality (the small one slips on some steps of the chained arithmetic, the large one rarely does) and differ in
step latency the way a GPU pair does. On a CPU at these sizes a decode step costs a fixed ~0.6-0.8 ms per layer
whatever the width (benchmarks/bench_depth.py), so the small member is one layer and the large one is deep and
narrow: ~15x the step time, for a training cost that width would multiply. Both are trained here from a seed,
supervised on worked solutions in chat format, with a fixed data order and thread count so the same seed gives
the same weights.

The seed-0 pair is committed under models/tiny-pair (fp16; its metrics.json holds the held-out accuracies and
training times), so demos need not train; `tokenrouter make-pair --force` rebuilds it in place (~30-40 minutes
on 2 shared cores, nearly all of it the large member).
"""

from __future__ import annotations

import fcntl
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from tokenrouter.cache import cache_dir
from tokenrouter.errors import UserError
from tokenrouter.models.tokenizer import build_char_tokenizer
from tokenrouter.tasks.arith import ArithProblem, ArithSpec, generate, messages

MEMBERS = ("small", "large")
FORMAT_VERSION = 2  # bump when the recipe changes so cached pairs are rebuilt


@dataclass(frozen=True)
class MemberRecipe:
    """Architecture and training schedule of one member."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    steps: int
    lr: float
    batch_size: int = 32

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class PairRecipe:
    """Everything that determines the pair's weights (with the seed and thread count)."""

    # Shapes from benchmarks/bench_depth.py: at these sizes a CPU step costs ~0.6-0.8 ms per layer whatever the
    # width, while training cost grows with width. So the small member is one (wide-ish) layer, the large one
    # deep and narrow: ~15x the small one's step time for a training step that fits the make-pair budget.
    small: MemberRecipe = MemberRecipe(hidden=64, layers=1, heads=2, intermediate=256, steps=1200, lr=3e-3)
    large: MemberRecipe = MemberRecipe(hidden=64, layers=40, heads=2, intermediate=256, steps=700, lr=2e-3)
    task: ArithSpec = field(default_factory=ArithSpec)
    warmup: int = 50
    weight_decay: float = 0.01
    threads: int = 1  # part of the recipe (float reductions may differ with the thread count)
    save_dtype: str = "float16"

    def member(self, name: str) -> MemberRecipe:
        return getattr(self, name)


def qwen3_config(recipe: MemberRecipe, tokenizer) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )


def encode_example(problem: ArithProblem, tokenizer) -> tuple[list[int], list[int]]:
    """(input ids, labels): the chat prompt is context only (label -100), the worked solution + EOS is learned."""
    prompt = tokenizer.apply_chat_template(messages(problem), add_generation_prompt=True, tokenize=True, return_dict=False)
    target = tokenizer.encode(problem.solution, add_special_tokens=False) + [tokenizer.eos_token_id]
    return list(prompt) + target, [-100] * len(prompt) + target


def _batch(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (x, y) in enumerate(examples):
        ids[row, : len(x)] = torch.tensor(x)
        labels[row, : len(y)] = torch.tensor(y)
        mask[row, : len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def train_member(
    name: str, recipe: PairRecipe, seed: int, tokenizer, progress: bool = True
) -> torch.nn.Module:
    """Train one member from seed: init, data stream and order all derive from (seed, name)."""
    from transformers import AutoModelForCausalLM

    member = recipe.member(name)
    torch.manual_seed(seed * 1000 + MEMBERS.index(name))
    model = AutoModelForCausalLM.from_config(qwen3_config(member, tokenizer), attn_implementation="sdpa")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=member.lr, betas=(0.9, 0.98), weight_decay=recipe.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _warmup_cosine(recipe.warmup, member.steps))
    rng = random.Random(f"pair:{seed}:{name}")
    bar = tqdm(range(member.steps), desc=f"make-pair {name}", disable=not progress, unit="step")
    for _ in bar:
        problems = generate(recipe.task, rng.getrandbits(64), member.batch_size, split="train")
        batch = _batch([encode_example(p, tokenizer) for p in problems], tokenizer.pad_token_id)
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    model.eval()
    return model


def _warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to 5% of the peak rate."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def held_out_accuracy(
    model: torch.nn.Module, tokenizer, problems: list[ArithProblem], max_new_tokens: int, batch_size: int = 64
) -> float:
    """Fraction of `problems` answered correctly by plain HF greedy generation (left-padded batches; RoPE
    attention is relative, so padding does not change the tokens)."""
    from tokenrouter.tasks.grading import is_correct

    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    correct = 0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        prompts = [tokenizer.apply_chat_template(messages(p), add_generation_prompt=True, tokenize=False) for p in chunk]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += sum(is_correct(text, p.answer) for text, p in zip(texts, chunk, strict=True))
    tokenizer.padding_side = side
    return correct / len(problems)


def stamp(recipe: PairRecipe, seed: int) -> dict:
    """What a built pair directory must record to be reused for (recipe, seed)."""
    return {"version": FORMAT_VERSION, "seed": seed, "recipe": asdict(recipe)}


def save_member(model: torch.nn.Module, tokenizer, out: Path, dtype: str) -> None:
    """safetensors + config.json + generation config + tokenizer, loadable by AutoModelForCausalLM."""
    from transformers import GenerationConfig

    model.to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def build_pair(out: Path, seed: int = 0, recipe: PairRecipe | None = None, eval_problems: int = 0,
               progress: bool = True) -> dict:
    """Train both members into a temp dir beside `out`, then rename it into place (readers never see a half
    build). Returns the metrics also written to `out`/metrics.json."""
    from tokenrouter.models.tiny_random import _install

    recipe = recipe or PairRecipe()
    tokenizer = build_char_tokenizer()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    metrics: dict = {"seed": seed, "members": {}}
    try:
        held_out = generate(recipe.task, seed, eval_problems) if eval_problems else []
        for name in MEMBERS:
            start, cpu = time.perf_counter(), time.process_time()
            model = train_member(name, recipe, seed, tokenizer, progress)
            info = {"train_s": round(time.perf_counter() - start, 1), "cpu_s": round(time.process_time() - cpu, 1),
                    "params": sum(p.numel() for p in model.parameters())}
            save_member(model, tokenizer, tmp / name, recipe.save_dtype)
            info["bytes"] = sum(f.stat().st_size for f in (tmp / name).glob("*.safetensors"))
            if held_out:
                info["accuracy"] = held_out_accuracy(model.float(), tokenizer, held_out, max_new_tokens=96)
                info["eval_problems"] = len(held_out)
            metrics["members"][name] = info
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        (tmp / "tokenrouter_build.json").write_text(json.dumps(stamp(recipe, seed), indent=2) + "\n")
        _install(tmp, out, replace=True)  # under the pair's file lock; --force rebuilds in place
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(tmp, ignore_errors=True)
    return metrics


def is_built(path: Path, recipe: PairRecipe, seed: int) -> bool:
    try:
        return json.loads((path / "tokenrouter_build.json").read_text()) == stamp(recipe, seed)
    except (OSError, ValueError):
        return False


def committed_dir() -> Path:
    """The pair shipped with the package (`tokenrouter/models/tiny_pair`: in a checkout a link to models/tiny-pair,
    in a wheel a copy), so `make demo` and the quickstart need not train."""
    return Path(__file__).resolve().parent / "tiny_pair"


def default_dir(seed: int = 0) -> Path:
    """Seed 0: the committed pair (checkout or installed package); other seeds: the cache."""
    if seed == 0 and committed_dir().is_dir():
        return committed_dir()
    return cache_dir() / ("tiny-pair" if seed == 0 else f"tiny-pair-seed{seed}")


def ensure_pair(seed: int = 0) -> dict[str, Path]:
    """Member directories of the default pair for `seed`, trained now (a few minutes, with a progress bar)
    unless already built with the current recipe."""
    recipe, found = PairRecipe(), default_dir(seed)
    if not is_built(found, recipe, seed):
        with _locked(found.with_name(found.name + ".lock")):  # subservers starting together train it once
            if not is_built(found, recipe, seed):
                print(f"tokenrouter: training the tiny model pair (seed {seed}) into {found} (done once)",
                      file=sys.stderr, flush=True)
                build_pair(found, seed, recipe)
    return {name: found / name for name in MEMBERS}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def member_path(name: str, seed: int = 0) -> Path:
    """Directory of `tiny:<name>` (the engine loader's entry point)."""
    if name not in MEMBERS:
        raise UserError(f"unknown tiny model {name!r}; use tiny:small or tiny:large")
    return ensure_pair(seed)[name]
