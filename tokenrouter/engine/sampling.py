"""Next-token sampling: greedy, or temperature / top-k / top-p with a per-request seed.

Why per (seed, position) generators: a request's random draw must not depend on which other requests share
its batch or on which model produced earlier tokens, so runs are reproducible across systems and schedules.
"""

from __future__ import annotations

import hashlib

import torch

from tokenrouter.engine.base import SamplingParams


def _generator(seed: int, position: int) -> torch.Generator:
    digest = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest()
    return torch.Generator(device="cpu").manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def filtered_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p (float32, one row of logits)."""
    scores = logits.float() / params.temperature
    if 0 < params.top_k < scores.numel():
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_p, dim=-1)
        drop = cum - sorted_p >= params.top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    return probs / probs.sum()


def sample(logits: torch.Tensor, params: list[SamplingParams], positions: list[int]) -> list[int]:
    """One token per row of `logits` [B, vocab]. `positions[i]` is the index in the sequence of the token
    being sampled (what makes a seeded draw reproducible)."""
    tokens = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if p.greedy:
            continue
        probs = filtered_probs(logits[i].cpu(), p)
        gen = _generator(p.seed, positions[i]) if p.seed is not None else None
        tokens[i] = int(torch.multinomial(probs, 1, generator=gen))
    return tokens
