"""The `tiny-random:small|large` pair: random-initialized tiny Qwen3 models built in code from a seed.

Why: tests and CPU runs need two real transformers models of different sizes with one tokenizer and no Hub.
They are built once into cache_dir()/tiny-random/{small,large} (safetensors + config + tokenizer); the build
goes to a temp dir that is renamed into place, so concurrent test processes never see a half-written model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokenrouter.cache import cache_dir
from tokenrouter.errors import UserError

BUILD_VERSION = 1  # bump when the architecture or init changes, so stale caches are rebuilt
SEED = 1234

# Weights are drawn with a large init std so logits are peaked: greedy tokens are then stable under float
# rounding differences between kernels (tests compare exact token ids) and small/large outputs differ.
SIZES: dict[str, dict[str, int | float | bool]] = {
    "small": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, head_dim=16, tie_word_embeddings=True),
    "large": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=16, tie_word_embeddings=False),
}
INIT_STD = 0.2


def build_model(size: str, seed: int = SEED):  # -> (Qwen3ForCausalLM, tokenizer)
    """Build (not save) one tiny model and the shared char tokenizer."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    from tokenrouter.models.tokenizer import build_char_tokenizer

    if size not in SIZES:
        raise UserError(f"unknown tiny-random size {size!r}; use one of {sorted(SIZES)}")
    hf_logging.disable_progress_bar()
    tok = build_char_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = Qwen3Config(
        vocab_size=len(tok),
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        initializer_range=INIT_STD,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        **SIZES[size],
    )
    gen = torch.Generator().manual_seed(seed * 1000 + sorted(SIZES).index(size))
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            else:
                param.copy_(INIT_STD * torch.randn(param.shape, generator=gen))
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=tok.pad_token_id)
    return model.eval(), tok


def tiny_random_path(size: str) -> Path:
    """Directory of the built model (built on first use)."""
    if size not in SIZES:
        raise UserError(f"unknown tiny-random model {size!r}; use tiny-random:small or tiny-random:large")
    def build(tmp: Path) -> None:
        model, tok = build_model(size)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return cached_build(cache_dir() / "tiny-random" / size, {"version": BUILD_VERSION, "seed": SEED}, build)


def cached_build(final: Path, stamp: dict[str, Any], build: Callable[[Path], None]) -> Path:
    """`final`, built by `build(dir)` unless it already holds a build with this `stamp` (its
    tokenrouter_build.json): into a temp dir beside it, then moved into place (`_install`)."""
    try:
        if json.loads((final / "tokenrouter_build.json").read_text()) == stamp:
            return final
    except (OSError, ValueError):
        pass
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        (tmp / "tokenrouter_build.json").write_text(json.dumps(stamp))
        _install(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _install(tmp: Path, final: Path, replace: bool = False) -> None:
    """Move a finished build into place; if another process got there first with the same build, keep theirs
    (replacing it would pull the directory from under a process that is loading it) unless `replace`."""
    marker = "tokenrouter_build.json"
    try:
        if not replace and (final / marker).read_text() == (tmp / marker).read_text():
            return
    except OSError:
        pass
    if final.exists():
        old = final.with_name(f".{final.name}-old-{os.getpid()}")
        try:
            os.rename(final, old)
        except OSError:
            pass
        else:
            shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / "tokenrouter_build.json").exists():
            raise


def save_random_decoder(path: str | Path, family: str = "qwen3", num_layers: int = 2, hidden_size: int = 128,
                        num_heads: int = 2, num_kv_heads: int = 1, head_dim: int = 64, seed: int = 0,
                        max_positions: int = 1024, eos: bool = False) -> Path:
    """Save a random Qwen3, Qwen2 or Llama decoder with the char tokenizer to `path` (safetensors, no Hub);
    `eos`: the config names <|im_end|> as end of sequence (else none: outputs run to max_new_tokens).

    Why another builder: SGLang's kernels want head_dim 64+ (the tiny-random pair has 16), engine tests want
    Llama as well as Qwen3, and rehearsals want each shipped set's architecture (models/stand_in.py). Wide
    init as above, so greedy tokens are stable across kernels."""
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    from tokenrouter.models.tokenizer import build_char_tokenizer

    classes = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
               "llama": (LlamaConfig, LlamaForCausalLM)}
    if family not in classes:
        raise UserError(f"unknown model family {family!r}; use one of {sorted(classes)}")
    tok = build_char_tokenizer()
    config_cls, model_cls = classes[family]
    config = config_cls(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                        num_hidden_layers=num_layers, num_attention_heads=num_heads,
                        num_key_value_heads=num_kv_heads, head_dim=head_dim, max_position_embeddings=max_positions,
                        rms_norm_eps=1e-6, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>") if eos else None,
                        bos_token_id=None, pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    gen = torch.Generator().manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            base = 1.0 if name.endswith("norm.weight") else 0.0
            param.copy_(base + INIT_STD * torch.randn(param.shape, generator=gen))
    path = Path(path)
    model.eval().save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path
