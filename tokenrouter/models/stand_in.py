"""Stand-ins for checkpoints a CPU cannot hold: tiny random models of the same architecture (`rehearse`).

Why: a GPU experiment's faults (configs, engines, rank processes, routers, loaders) mostly show on CPU if the
same job runs through the same code with a model of the same `model_type` in place of the checkpoint. A
stand-in keeps what the serving path depends on: the architecture class, grouped-query attention with heads
that divide over the member's TP ranks, a head dim SGLang's kernels take (64), and a chat template (the char
tokenizer's, Qwen-style). It does not keep the vocabulary size (the tokenizer is the 100-token char one) or
the real width and depth. Built once per (architecture, heads) into the cache, atomically.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from tokenrouter.cache import cache_dir
from tokenrouter.errors import UserError

STAND_IN_VERSION = 1
HEAD_DIM = 64
HEADS = 8
LAYERS = 2
# Hub id prefixes of the shipped model sets -> the checkpoint's model_type (config.json), for stand-ins made
# without the checkpoint's files
KNOWN_TYPES = {"Qwen/Qwen3-": "qwen3", "deepseek-ai/DeepSeek-R1-Distill-Qwen-": "qwen2",
               "meta-llama/": "llama"}
FAMILIES = ("qwen3", "qwen2", "llama")


def model_type(source: str) -> str:
    """The architecture of `source`: its config.json when on disk, else the shipped sets' Hub ids."""
    config = Path(source).expanduser() / "config.json"
    if config.is_file():
        kind = str(json.loads(config.read_text()).get("model_type", ""))
    else:
        kind = next((t for prefix, t in KNOWN_TYPES.items() if source.startswith(prefix)), "")
    if kind not in FAMILIES:
        raise UserError(f"no stand-in for model {source!r} (architecture {kind or 'unknown'}; stand-ins exist for "
                        f"{', '.join(FAMILIES)})")
    return kind


def kv_heads_for(tp: int) -> int:
    """Grouped-query KV heads that divide over `tp` ranks (one KV head per rank at most), as real sets do."""
    if HEADS % tp:
        raise UserError(f"no stand-in for tp={tp}: its {HEADS} attention heads do not divide over {tp} ranks")
    return max(2, tp)


def stand_in_path(kind: str, tp: int, seed: int = 0) -> Path:
    """A tiny random `kind` model (safetensors + char tokenizer) whose heads divide over `tp` ranks."""
    kv = kv_heads_for(tp)
    final = cache_dir() / "stand-ins" / f"{kind}-kv{kv}-seed{seed}"
    stamp = {"version": STAND_IN_VERSION, "kind": kind, "kv_heads": kv, "seed": seed}
    try:
        if json.loads((final / "tokenrouter_build.json").read_text()) == stamp:
            return final
    except (OSError, ValueError):
        pass
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        _save(kind, kv, seed, tmp)
        (tmp / "tokenrouter_build.json").write_text(json.dumps(stamp))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _save(kind: str, kv_heads: int, seed: int, path: Path) -> None:
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    from tokenrouter.models.tiny_random import INIT_STD
    from tokenrouter.models.tokenizer import build_char_tokenizer

    classes = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
               "llama": (LlamaConfig, LlamaForCausalLM)}
    config_cls, model_cls = classes[kind]
    tok = build_char_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    hidden = HEADS * HEAD_DIM
    config = config_cls(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=kv_heads,
                        head_dim=HEAD_DIM, max_position_embeddings=4096, rms_norm_eps=1e-6, eos_token_id=eos,
                        bos_token_id=None, pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    gen = torch.Generator().manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            base = 1.0 if name.endswith("norm.weight") else 0.0
            param.copy_(base + INIT_STD * torch.randn(param.shape, generator=gen))
    model.eval().save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
