"""One model's request states and its delayed-batching decision.

Why delayed batching: with several models, a batch launched as soon as one request is ready fragments into
many small, slow-per-token steps; waiting until B_i requests are ready (B_i chosen for the current global
active count N) raises throughput. Thresholds arrive already clipped to be feasible for N, so some model can
always launch; the max-wait bound is a second guard (a ready request never waits longer than it).

Admission (admission.py) reserves each request's worst-case KV so admitted requests can always finish
without preemption; a request that could never fit is rejected at once instead of waiting.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from tokenrouter.api import RouterRequest
from tokenrouter.runtime.admission import KVBudget
from tokenrouter.runtime.messages import RequestMeta


class Status(enum.Enum):
    WAITING = "waiting"  # known here, not admitted yet (KV reservation pending)
    READY = "ready"  # admitted, has tokens to process, queued for a step
    RUNNING = "running"  # in the step being executed
    PENDING = "pending"  # handed to a peer; KV kept here
    FINISHED = "finished"


@dataclass
class Entry:
    req: RouterRequest
    meta: RequestMeta
    status: Status = Status.WAITING
    since: float = 0.0  # when it joined the queue (max-wait clock)
    reserved: int = 0  # KV tokens reserved at admission
    handoffs: int = 0  # hand-offs of this request so far (all models)
    stalled: int = 0  # of them, those since its last committed token (runtime.max_handoffs_per_token)
    stop_ids: frozenset[int] = field(default_factory=frozenset)
    input_len: int = 1  # tokens its next step feeds (prefill: the prompt, decode: 1, extend: what it missed)


class Scheduler:
    def __init__(
        self,
        capacity_tokens: int,
        page_size: int,
        max_batch_size: int,
        max_step_tokens: int,
        max_wait_s: float,
    ) -> None:
        self.kv = KVBudget(capacity_tokens, page_size)
        self.max_batch_size = max_batch_size
        self.max_step_tokens = max_step_tokens
        self.max_wait_s = max_wait_s
        self.threshold = 1
        self.launch_mask: int | None = None  # runtime.policy=optimal: bit k set = launch with k ready (for N)
        self.entries: dict[str, Entry] = {}
        self._waiting: deque[Entry] = deque()
        self._ready: dict[str, Entry] = {}  # insertion order = queue order

    def add(self, e: Entry, now: float) -> str | None:
        """Queue a request new to this model; returns an error if it can never fit."""
        error = self.kv.never_fits(len(e.req.prompt_ids), e.req.max_new_tokens)
        if error is not None:
            return error
        e.status, e.since = Status.WAITING, now
        self.entries[e.req.rid] = e
        self._waiting.append(e)
        self._admit()
        return None

    def make_ready(self, entries: list[Entry], now: float, input_len: int = 1) -> None:
        """Requests of this model have `input_len` new tokens each to process: a step's stayers (1, a decode),
        or one back from a peer (what it missed). A whole step's at once, in order: one call per step."""
        ready = self._ready
        for e in entries:
            if e.status is not Status.WAITING:  # a waiting one: admission will queue it
                e.status, e.since, e.input_len = Status.READY, now, input_len
                ready[e.req.rid] = e

    def pend(self, e: Entry) -> None:
        e.status = Status.PENDING

    def remove(self, rid: str) -> Entry | None:
        e = self.entries.pop(rid, None)
        if e is None:
            return None
        if e.status is Status.WAITING:
            self._waiting.remove(e)
        self._ready.pop(rid, None)
        self.kv.release(e.reserved)
        e.status = Status.FINISHED
        return e

    def _admit(self) -> None:
        while self._waiting:
            e = self._waiting[0]
            need = self.kv.need(len(e.req.prompt_ids), e.req.max_new_tokens)
            if not self.kv.try_reserve(need):
                return
            self._waiting.popleft()
            e.reserved = need
            e.status = Status.READY
            e.input_len = e.req.seq_len  # new to this model: nothing of it in the KV yet
            self._ready[e.req.rid] = e

    def occupancy(self) -> dict[str, int]:
        """Requests waiting for KV space and the KV tokens reserved, for the /metrics gauges."""
        return {"waiting": len(self._waiting), "kv_reserved": self.kv.reserved, "kv_capacity": self.kv.capacity}

    def queue_lengths(self) -> tuple[int, int]:
        """(requests ready, requests waiting for KV)."""
        return len(self._ready), len(self._waiting)

    @property
    def has_work(self) -> bool:
        """Requests ready to step or waiting for KV (which a release may have freed): `next_batch()` is due."""
        return bool(self._ready or self._waiting)

    def next_batch(self, now: float) -> list[Entry]:
        """The batch to run now (empty: wait). Launches the whole queue (up to the batch size and token
        budget, oldest first) once >= threshold requests are ready or the oldest waited max_wait."""
        self._admit()
        if not self._ready:
            return []
        oldest = next(iter(self._ready.values()))
        # requests waiting for KV count toward the threshold: N (which the thresholds are feasible for)
        # counts them too, so a model whose queue is full of them must not wait for more
        if not self.launches(len(self._ready) + len(self._waiting)) and now - oldest.since < self.max_wait_s:
            return []
        batch: list[Entry] = []
        tokens = 0
        for e in self._ready.values():
            n = e.input_len
            if batch and (len(batch) >= self.max_batch_size or tokens + n > self.max_step_tokens):
                break
            batch.append(e)
            tokens += n
        for e in batch:
            del self._ready[e.req.rid]
            e.status = Status.RUNNING
        return batch

    def launches(self, count: int) -> bool:
        """The launch decision on what this model observes: its own count and N (through the rule for N).
        A count above N (the rule's last bit, before the front end's next Active) follows bit N."""
        if self.launch_mask is None:
            return count >= self.threshold
        top = self.launch_mask.bit_length() - 1  # N (a rule that never launches: -1, max-wait still applies)
        return top >= 0 and bool(self.launch_mask >> min(count, top) & 1)

    def wait_timeout(self, now: float) -> float | None:
        """Seconds until the max-wait bound forces a launch (None: nothing is ready, block)."""
        if not self._ready:
            return None
        oldest = next(iter(self._ready.values()))
        return max(0.0, oldest.since + self.max_wait_s - now)
