"""Next-token sampling: greedy, or temperature / top-k / top-p with a per-request seed.

Why per (seed, position) generators: a request's random draw must not depend on which other requests share
its batch or on which model produced earlier tokens, so runs are reproducible across systems and schedules.
"""

from __future__ import annotations

import hashlib

import torch

from tokenrouter.engine.base import GREEDY_TEMPERATURE, SamplingParams


def _generator(seed: int, position: int) -> torch.Generator:
    digest = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest()
    return torch.Generator(device="cpu").manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


# The largest temperature a float32 division takes without turning it into inf (-inf / inf would be NaN).
_MAX_TEMPERATURE = float(torch.finfo(torch.float32).max)


def filtered_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p (float32, one row of logits).

    NaN-free for any parameters, so one request's extreme values cannot fail a batch: the temperature is
    clamped to [GREEDY_TEMPERATURE, float32 max] (NaN: the floor), the scores are shifted so the best is 0
    before dividing (they lie in [-inf, 0] and the best keeps probability > 0), and the most likely token
    always survives top-p."""
    t = params.temperature
    t = min(t, _MAX_TEMPERATURE) if t >= GREEDY_TEMPERATURE else GREEDY_TEMPERATURE
    scores = logits.float()
    scores = (scores - scores.max()) / t
    if 0 < params.top_k < scores.numel():
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_p, dim=-1)
        drop = cum - sorted_p >= params.top_p  # keep the smallest prefix whose mass reaches top_p
        drop[0] = False  # never nothing (top_p <= 0)
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    return probs / probs.sum()


def sample(logits: torch.Tensor, params: list[SamplingParams], positions: list[int],
           banned: list[tuple[int, ...]] | None = None) -> list[int]:
    """One token per row of `logits` [B, vocab]. `positions[i]` is the index in the sequence of the token
    being sampled (what makes a seeded draw reproducible); `banned[i]`: ids row i may not sample (masked on a
    copy: routers still see the model's own logits)."""
    rows = [i for i, ids in enumerate(banned or []) if ids]
    if rows:
        logits = logits.clone()
        for i in rows:
            ids = [t for t in banned[i] if 0 <= t < logits.shape[-1]]  # type: ignore[index]
            if len(ids) < logits.shape[-1]:  # a row cannot ban every token
                logits[i, ids] = float("-inf")
    tokens = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if p.greedy:
            continue
        probs = filtered_probs(logits[i].cpu(), p)
        gen = _generator(p.seed, positions[i]) if p.seed is not None else None
        tokens[i] = int(torch.multinomial(probs, 1, generator=gen))
    return tokens
