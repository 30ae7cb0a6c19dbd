"""The torch engine: a stock Hugging Face causal LM driven over a paged KV pool, one forward per step.

Why this shape: a routed request is parked on one model while another generates, then resumes with an
extend, so each step mixes prefills, decodes and extends. All new tokens are packed into one [1, T] batch
with per-token positions; the registered paged attention (attention.py) keeps every request's KV in our
pool, so transformers keeps no cache (`use_cache=False`) and no model code is duplicated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tokenrouter.config import ModelSpec
from tokenrouter.engine import attention
from tokenrouter.engine.base import ALL_STEP_OUTPUTS, Engine, StepItem, StepOutput, check_step_items
from tokenrouter.engine.kv_pool import KVLayout, KVPool, pool_tokens
from tokenrouter.engine.sampling import sample
from tokenrouter.errors import UserError

if TYPE_CHECKING:
    from tokenrouter.engine.base import StepOutputs


class TorchEngine(Engine):
    def __init__(
        self,
        model: Any,
        name: str = "model",
        kv_tokens: int = 65536,
        page_size: int = 16,
        kv_bytes: int | None = None,
        mem_fraction: float | None = None,
        tokenizer: Any = None,
        tp: int = 1,
    ) -> None:
        cfg = model.config
        if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "sliding_window", None) and any(
            t == "sliding_attention" for t in getattr(cfg, "layer_types", None) or ()
        ):
            raise UserError(f"model {name!r}: sliding-window attention is not supported by the torch engine")
        self.name = name
        self.model = model
        self.tokenizer = tokenizer  # None when built from a bare model
        model.set_attn_implementation(attention.ATTN_NAME)
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        param = next(model.parameters())
        self.device = param.device
        self.dtype = param.dtype
        self.vocab_size = int(cfg.vocab_size)
        self.max_positions = getattr(cfg, "max_position_embeddings", None)
        self.hidden_size = int(cfg.hidden_size)
        self.eos_token_ids = _eos_ids(model, tokenizer)
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        # (tp divides the heads: loader.check_tp ran before any rank started) under a TP plan each rank's attention sees its shard of the heads, so its pool holds only those
        layout = KVLayout(num_layers=cfg.num_hidden_layers, num_kv_heads=kv_heads // tp, head_dim=head_dim,
                          dtype=self.dtype)
        self._embeddings = _local_embeddings(model.get_input_embeddings())
        tokens = pool_tokens(layout, self.device, kv_tokens, kv_bytes, mem_fraction)
        self.pool = KVPool(layout, tokens, page_size, self.device)
        self.page_size = page_size

    @classmethod
    def from_spec(cls, spec: ModelSpec, tp: int = 1) -> TorchEngine:
        """This process's engine for `spec`; with tp > 1, one rank's shard (called on every rank: tp.py)."""
        from tokenrouter.engine.loader import load_model, load_tokenizer

        if spec.device == "cpu" or spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        elif spec.device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"model {spec.name!r}: device {spec.device!r} requested but CUDA is not available")
        model = load_model(spec.source, spec.dtype, spec.device, tp)
        return cls(
            model,
            name=spec.name,
            kv_tokens=spec.kv_tokens,
            page_size=spec.page_size,
            kv_bytes=spec.kv_bytes,
            mem_fraction=spec.mem_fraction,
            tokenizer=load_tokenizer(spec.source),
            tp=tp,
        )

    # ---- the step -----------------------------------------------------------------------------------------
    def step(self, items: list[StepItem], outputs: StepOutputs = ALL_STEP_OUTPUTS) -> StepOutput:
        if not items:
            return StepOutput(rids=[], next_tokens=[])
        rids, counts, ids = self.check_step(items)
        lens_before = [self.pool.seq_len(r) for r in rids]
        try:
            hidden, logits = self._forward(items, ids, lens_before, counts)
        except BaseException:
            for rid, before in zip(rids, lens_before, strict=True):
                self._rollback(rid, before)
            raise
        next_pos = [b + n for b, n in zip(lens_before, counts, strict=True)]
        tokens = sample(logits, [it.sampling for it in items], next_pos, [it.banned_ids for it in items])
        return StepOutput.asked(rids, tokens, logits, hidden, outputs)

    def check_step(self, items: list[StepItem]) -> tuple[list[str], list[int], list[int]]:
        rids, counts, ids = check_step_items(items, self.vocab_size)
        self.pool.check_fits(dict(zip(rids, counts, strict=True)))
        return rids, counts, ids

    @torch.inference_mode()
    def _forward(self, items: list[StepItem], ids: list[int], lens_before: list[int],
                 counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Allocate the new tokens' KV slots and run the packed forward: (last hidden, last logits) per item."""
        slots: list[int] = []
        positions: list[int] = []
        for it, before, n in zip(items, lens_before, counts, strict=True):
            slots += self.pool.alloc(it.rid, n)
            positions += range(before, before + n)
        rids = [it.rid for it in items]
        batch = attention.build_paged_batch(self.pool, lens_before, counts, rids, slots)
        out = self.decoder(
            input_ids=torch.tensor([ids], device=self.device),
            position_ids=torch.tensor([positions], device=self.device),
            use_cache=False,
            paged_batch=batch,
        )
        last = torch.tensor(counts, device=self.device).cumsum(0) - 1
        hidden = out.last_hidden_state[0].index_select(0, last)
        return hidden, self.lm_head(hidden).float()

    def _rollback(self, rid: str, length: int) -> None:
        if length == 0:
            self.pool.free(rid)
        elif rid in self.pool:
            self.pool.truncate(rid, length)

    # ---- KV management ------------------------------------------------------------------------------------
    def release(self, rid: str) -> None:
        self.pool.free(rid)

    def truncate(self, rid: str, length: int) -> None:
        if length == 0:
            self.pool.free(rid)
        else:
            self.pool.truncate(rid, length)

    def seq_len(self, rid: str) -> int:
        return self.pool.seq_len(rid)

    def holds(self, rid: str) -> bool:
        return rid in self.pool

    def tokens_free(self) -> int:
        return self.pool.tokens_free()

    def tokens_used(self) -> int:
        return self.pool.tokens_used()

    def can_fit(self, rid: str, num_new_tokens: int) -> bool:
        return self.pool.can_fit(rid, num_new_tokens)

    def input_embeddings(self) -> torch.nn.Embedding:
        return self._embeddings

    def close(self) -> None:
        """Drop the weights and the KV pool, so their memory is freed even while something (a traceback, a
        caller) still holds this engine. Safe to call twice; the engine serves nothing afterwards."""
        self.model = self.decoder = self.lm_head = self._embeddings = None
        self.pool.close()


def _local_embeddings(emb: torch.nn.Embedding) -> torch.nn.Embedding:
    """The input embedding as an ordinary module. Under a TP plan its weight may be a sharded DTensor, whose
    lookup is a collective; routers call it on rank 0 alone, so every rank gathers a local copy once here."""
    weight = emb.weight
    if not hasattr(weight, "full_tensor"):
        return emb
    with torch.no_grad():
        return torch.nn.Embedding.from_pretrained(weight.full_tensor().detach().clone(), freeze=True)


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """End-of-sequence ids: the generation config's (may be a list), else the model config's / tokenizer's."""
    ids: list[int] = []
    for src in (getattr(model, "generation_config", None), model.config):
        eos = getattr(src, "eos_token_id", None) if src is not None else None
        if eos is not None:
            ids += eos if isinstance(eos, list | tuple) else [eos]
    if not ids and tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return tuple(dict.fromkeys(int(i) for i in ids))
