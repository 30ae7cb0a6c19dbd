"""Paged attention for stock Hugging Face models, plugged in through `transformers.AttentionInterface`.

Why: the model code stays the stock transformers code (Llama, Qwen2, Qwen3, ...); only the attention call is
ours. The engine runs the model on a packed batch [1, T] (all requests' new tokens concatenated, per-token
positions) and passes a `PagedBatch` as the forward keyword `paged_batch`; transformers hands it through to
this function in every layer, which writes the new K/V into the pool and attends each request's queries to
its cached + new keys with a causal offset. Decode tokens (one per request) are attended in one batched call;
prefill / extend spans get one call each.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from tokenrouter.engine.kv_pool import KVPool

ATTN_NAME = "tokenrouter_paged"


@dataclass
class Span:
    """A request with several new tokens: packed rows [start, end) attend to kv slots `kv_idx` (len L), or,
    for a fresh prefill (kv_idx None), to the step's own keys of those rows, causally."""

    start: int
    end: int
    kv_idx: torch.Tensor | None  # [L] slot ids, the last end-start of them are the new tokens
    mask: torch.Tensor | None  # [n, L] bool (True = attend); None for a fresh prefill (plain causal)


@dataclass
class PagedBatch:
    """Per-step metadata, built once per step and shared by all layers."""

    pool: KVPool
    write_slots: torch.Tensor  # [T] slot for each packed token
    dec_rows: torch.Tensor | None  # [Bd] packed rows of single-token (decode) requests
    dec_kv_idx: torch.Tensor | None  # [Bd, Lmax] slot ids; padding points at zeroed or stale slots, masked
    dec_mask: torch.Tensor | None  # [Bd, 1, 1, Lmax] bool, None when all lengths are equal
    spans: list[Span]

    @property
    def all_decode(self) -> bool:
        return not self.spans


def _slot_index(tables: list[list[int]], length: int, page_size: int, device: torch.device) -> torch.Tensor:
    """[len(tables), length] slot ids of positions 0..length-1 (short tables padded with their first page)."""
    pages = -(-length // page_size)
    pt = torch.tensor([t[:pages] + [t[0]] * (pages - len(t[:pages])) for t in tables], device=device)
    pos = torch.arange(length, device=device)
    return pt[:, pos // page_size] * page_size + pos % page_size


def build_paged_batch(pool: KVPool, lens_before: list[int], new_counts: list[int], rids: list[str],
                      write_slots: list[int]) -> PagedBatch:
    """Metadata for one step. Call after the new tokens' slots were allocated in `pool`.
    Slot indices are computed from page tables with tensor ops, so the Python work per step grows with
    pages, not tokens."""
    device, ps = pool.device, pool.page_size
    dec_rows: list[int] = []
    dec_tables: list[list[int]] = []
    dec_lens: list[int] = []
    spans: list[Span] = []
    row = 0
    for rid, before, n in zip(rids, lens_before, new_counts, strict=True):
        total = before + n
        if n == 1:
            dec_rows.append(row)
            dec_tables.append(pool.page_table(rid))
            dec_lens.append(total)
        else:
            kv_idx = mask = None
            if before:
                q_pos = torch.arange(before, total, device=device).unsqueeze(1)
                mask = torch.arange(total, device=device).unsqueeze(0) <= q_pos
                kv_idx = _slot_index([pool.page_table(rid)], total, ps, device)[0]
            spans.append(Span(row, row + n, kv_idx, mask))
        row += n
    dec_rows_t = dec_kv = dec_mask = None
    if dec_rows:
        lmax = max(dec_lens)
        dec_kv = _slot_index(dec_tables, lmax, ps, device)
        if min(dec_lens) != lmax:
            lens = torch.tensor(dec_lens, device=device)
            dec_mask = (torch.arange(lmax, device=device).unsqueeze(0) < lens.unsqueeze(1))[:, None, None, :]
        dec_rows_t = torch.tensor(dec_rows, device=device)
    return PagedBatch(pool, torch.tensor(write_slots, device=device), dec_rows_t, dec_kv, dec_mask, spans)


def _gather(cache: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """cache[idx] for slot ids of any shape (index_select: several times faster than advanced indexing on CPU)."""
    return cache.index_select(0, idx.reshape(-1)).view(*idx.shape, *cache.shape[1:])


def paged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [1, H, T, D]
    key: torch.Tensor,  # [1, Hkv, T, D]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    paged_batch: PagedBatch | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Write this layer's new K/V to the pool, then attend. Returns [1, T, H, D] like transformers' kernels."""
    if paged_batch is None:
        raise RuntimeError(f"attention {ATTN_NAME!r} needs the `paged_batch` forward argument (TorchEngine.step)")
    pb = paged_batch
    layer = module.layer_idx
    k_cache, v_cache = pb.pool.k[layer], pb.pool.v[layer]
    k_cache.index_copy_(0, pb.write_slots, key[0].transpose(0, 1).to(k_cache.dtype))
    v_cache.index_copy_(0, pb.write_slots, value[0].transpose(0, 1).to(v_cache.dtype))

    _, heads, tokens, dim = query.shape
    kv_heads = key.shape[1]
    if pb.dec_rows is not None:
        # One query per request: fold each kv head's query group into the query-length axis, so GQA needs no
        # K/V repeat and the kernel sees [Bd, Hkv, group, D] x [Bd, Hkv, Lmax, D].
        q = query[0].transpose(0, 1)  # [T, H, D]
        if not pb.all_decode:
            q = q.index_select(0, pb.dec_rows)
        q = q.reshape(-1, kv_heads, heads // kv_heads, dim)
        k = _gather(k_cache, pb.dec_kv_idx).transpose(1, 2)  # [Bd, Hkv, Lmax, D]
        v = _gather(v_cache, pb.dec_kv_idx).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=pb.dec_mask, scale=scaling).reshape(-1, heads, dim)
        if pb.all_decode:
            return o.unsqueeze(0), None
    out = query.new_empty(tokens, heads, dim)
    if pb.dec_rows is not None:
        out.index_copy_(0, pb.dec_rows, o)
    gqa = heads != kv_heads
    for sp in pb.spans:
        q = query[:, :, sp.start : sp.end, :]  # [1, H, n, D]
        if sp.kv_idx is None:
            k, v = key[:, :, sp.start : sp.end, :], value[:, :, sp.start : sp.end, :]
        else:
            k = _gather(k_cache, sp.kv_idx).transpose(0, 1).unsqueeze(0)  # [1, Hkv, L, D]
            v = _gather(v_cache, sp.kv_idx).transpose(0, 1).unsqueeze(0)
        if sp.mask is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, enable_gqa=gqa)
        else:
            o = masked_attention(q, k, v, sp.mask, scaling)
        out[sp.start : sp.end] = o[0].transpose(0, 1)
    return out.unsqueeze(0), None


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     scale: float | None) -> torch.Tensor:
    """SDPA of q [1, H, n, D] over k, v [1, Hkv, L, D] under mask [n, L], GQA folded as the decode path does.

    Why: SDPA with both `attn_mask` and `enable_gqa` has no fused kernel and falls back to the math one (slow,
    with [H, n, L] temporaries on large models); folding each kv head's query group into the query axis
    ([1, Hkv, group * n, D], the mask repeated per group) needs neither a K/V repeat nor `enable_gqa`."""
    _, heads, n, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    if group == 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    folded = q.reshape(1, kv_heads, group * n, dim)  # head h = kv_head * group + g: rows (g, i) per kv head
    o = F.scaled_dot_product_attention(folded, k, v, attn_mask=mask.repeat(group, 1), scale=scale)
    return o.reshape(1, heads, n, dim)


AttentionInterface.register(ATTN_NAME, paged_attention)
