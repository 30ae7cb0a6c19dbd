"""Stand-ins for checkpoints a CPU cannot hold: tiny random models of the same architecture (`rehearse`).

Why: a GPU experiment's faults (configs, engines, rank processes, routers, loaders) mostly show on CPU if the
same job runs through the same code with a model of the same `model_type` in place of the checkpoint. A
stand-in keeps what the serving path depends on: the architecture class, grouped-query attention with heads
that divide over the member's TP ranks, a head dim SGLang's kernels take (64), and a chat template (the char
tokenizer's, Qwen-style). It does not keep the vocabulary size (the tokenizer is the 100-token char one) or
the real width and depth. Built once per (architecture, heads) into the cache, as tiny-random is.
"""

from __future__ import annotations

import json
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
    from tokenrouter.models.tiny_random import cached_build, save_random_decoder

    kv = kv_heads_for(tp)
    stamp = {"version": STAND_IN_VERSION, "kind": kind, "kv_heads": kv, "seed": seed}

    def build(tmp: Path) -> None:
        save_random_decoder(tmp, kind, num_layers=LAYERS, hidden_size=HEADS * HEAD_DIM, num_heads=HEADS,
                            num_kv_heads=kv, head_dim=HEAD_DIM, seed=seed, max_positions=4096, eos=True)

    return cached_build(cache_dir() / "stand-ins" / f"{kind}-kv{kv}-seed{seed}", stamp, build)
