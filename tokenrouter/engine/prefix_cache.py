"""A prefix cache in front of any engine: a released request's KV stays (bounded LRU by tokens), keyed by the
token ids it holds, so a new request whose prompt extends that prefix only extends.

Why: the "Std. Serving" baseline resends a request's whole prefix to a single-model server for every token.
SGLang's radix cache turns that into an extend of one token; without a cache the server would prefill the
whole prefix each time and the baseline would measure recomputation instead of bookkeeping. This is a
deliberately simple version of it: a flat list of cached sequences (not a radix tree); a hit takes the entry
with the longest common prefix, truncates it to that prefix and hands it to the new request (the rest of
that entry is dropped, no branch sharing). At least one token is always recomputed so the step still yields
next-token logits. Entries are evicted least-recently-cached first when over budget or when a step needs room.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
from msgspec.structs import replace

from tokenrouter.engine.base import ALL_STEP_OUTPUTS, Engine, StepItem, StepOutput, StepOutputs
from tokenrouter.errors import CapacityError


@dataclass
class PrefixCacheStats:
    lookups: int = 0
    hits: int = 0
    hit_tokens: int = 0  # prompt tokens served from the cache instead of recomputed
    evicted_tokens: int = 0
    bookkeeping_s: float = 0.0  # time spent matching, truncating and evicting

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


class PrefixCachingEngine(Engine):
    """Wraps `inner`; request ids seen by the caller map onto internal ids so cached KV can change owner."""

    def __init__(self, inner: Engine, budget_tokens: int) -> None:
        self.inner = inner
        self.budget_tokens = budget_tokens
        self.name = inner.name
        self.eos_token_ids = inner.eos_token_ids
        self.vocab_size = inner.vocab_size
        self.hidden_size = inner.hidden_size
        self.device = inner.device
        self.max_positions = inner.max_positions
        self._ids = (f"pc{i}" for i in itertools.count())
        self._alias: dict[str, str] = {}  # caller's rid -> internal id
        self._held: dict[str, list[int]] = {}  # internal id -> token ids in its KV (live and cached)
        self._cached: OrderedDict[str, None] = OrderedDict()  # internal ids of released requests, LRU first
        self._cached_tokens = 0
        self.stats = PrefixCacheStats()

    # ---- step ---------------------------------------------------------------------------------------------
    def step(self, items: list[StepItem], outputs: StepOutputs = ALL_STEP_OUTPUTS) -> StepOutput:
        t0 = time.perf_counter()
        inner_items = [self._admit(it) for it in items]
        self._make_room(inner_items)
        self.stats.bookkeeping_s += time.perf_counter() - t0
        try:
            out = self.inner.step(inner_items, outputs)
        except CapacityError:
            if not self._cached:
                raise
            while self._cached:  # paged pools can need more than the token count says: give back everything
                self._evict_one()
            out = self.inner.step(inner_items, outputs)
        for it in inner_items:
            self._held[it.rid].extend(it.token_ids)
        return StepOutput([it.rid for it in items], out.next_tokens, out.logits, out.hidden)

    def _admit(self, item: StepItem) -> StepItem:
        """The item as the inner engine sees it: a new request takes over the best cached prefix."""
        inner = self._alias.get(item.rid)
        if inner is not None:
            return replace(item, rid=inner)
        self.stats.lookups += 1
        best, best_len = self._longest_match(item.token_ids)
        reuse = min(best_len, len(item.token_ids) - 1)
        if best is not None and reuse > 0:
            self._uncache(best)
            if reuse < len(self._held[best]):
                self.inner.truncate(best, reuse)
                del self._held[best][reuse:]
            self.stats.hits += 1
            self.stats.hit_tokens += reuse
            inner = best
        else:
            inner = next(self._ids)
            self._held[inner] = []
            reuse = 0
        self._alias[item.rid] = inner
        return replace(item, rid=inner, token_ids=item.token_ids[reuse:])

    def _longest_match(self, tokens: list[int]) -> tuple[str | None, int]:
        best, best_len = None, 0
        for cid in reversed(self._cached):
            n = _common_prefix(self._held[cid], tokens)
            if n > best_len:
                best, best_len = cid, n
        return best, best_len

    # ---- cache bookkeeping --------------------------------------------------------------------------------
    def _uncache(self, cid: str) -> None:
        del self._cached[cid]
        self._cached_tokens -= len(self._held[cid])

    def _evict_one(self) -> None:
        cid = next(iter(self._cached))
        self._uncache(cid)
        self.stats.evicted_tokens += len(self._held.pop(cid))
        self.inner.release(cid)

    def _make_room(self, items: list[StepItem]) -> None:
        new_tokens = sum(len(it.token_ids) for it in items)
        while self._cached and (
            self.inner.tokens_free() < new_tokens
            or not all(self.inner.can_fit(it.rid, len(it.token_ids)) for it in items)
        ):
            self._evict_one()

    def release(self, rid: str) -> None:
        inner = self._alias.pop(rid, None)
        if inner is None:
            return
        t0 = time.perf_counter()
        held = len(self._held[inner])
        if held == 0 or held > self.budget_tokens:
            self._held.pop(inner)
            self.inner.release(inner)
        else:
            self._cached[inner] = None
            self._cached_tokens += held
            while self._cached_tokens > self.budget_tokens:
                self._evict_one()
        self.stats.bookkeeping_s += time.perf_counter() - t0

    # ---- the rest of the interface --------------------------------------------------------------------------
    def truncate(self, rid: str, length: int) -> None:
        inner = self._alias.get(rid)
        if inner is not None:
            self.inner.truncate(inner, length)
            del self._held[inner][max(length, 0):]

    def seq_len(self, rid: str) -> int:
        inner = self._alias.get(rid)
        return 0 if inner is None else self.inner.seq_len(inner)

    def tokens_free(self) -> int:
        """Free slots plus what evicting the cache would give back."""
        return self.inner.tokens_free() + self._cached_tokens

    def tokens_used(self) -> int:
        return self.inner.tokens_used() - self._cached_tokens

    def can_fit(self, rid: str, num_new_tokens: int) -> bool:
        inner = self._alias.get(rid, rid)
        while not self.inner.can_fit(inner, num_new_tokens) and self._cached:
            self._evict_one()
        return self.inner.can_fit(inner, num_new_tokens)

    def input_embeddings(self) -> torch.nn.Embedding | None:
        return self.inner.input_embeddings()

    def close(self) -> None:
        self.inner.close()


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix, by slice comparisons (C speed) and bisection rather than a Python loop."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
