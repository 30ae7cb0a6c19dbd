"""What a stepping loop records per batch, and what a serving system collects while `runtime.trace` is on.

Recording is one small object per batch (no per-token work, nothing written to disk): a subserver ships its
records to the front end inside the Reports it sends anyway, the lock-step driver keeps them in process. Each
recorder stops at `runtime.trace_max_batches`; the trace then says which models reached the cap.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import msgspec

from tokenrouter.generation import GenerationResult

RECENT_STEPS = 16  # a request's wait is split over this many of its model's latest steps (older: idle)


class BatchRecord(msgspec.Struct, array_like=True):
    """One batch on one model. `wait_*`: summed over its rows, from the moment each row was ready on this
    model to the launch; `busy_wait_s` is the part of it during this model's earlier steps (waiting for a busy
    model), the rest was spent with the model idle (for a delayed-batching threshold, or, in lock-step, for the
    other model's step)."""

    model: int
    launch: float  # perf_counter seconds: the batch left the queue
    end: float  # its step, routing and bookkeeping done
    engine_s: float  # the engine step alone
    rows: int
    decode_rows: int  # rows that fed one token (a decode); the others fed a prompt or an extend
    input_tokens: int
    committed: int
    handoffs: int
    threshold: int  # in force at launch (0: the system has no delayed batching)
    ready: int  # requests in this model's queue at launch, this batch's included
    active: int  # the global active request count N at launch
    forced: bool  # launched by the max-wait bound below its threshold
    wait_s: float
    wait_max_s: float
    busy_wait_s: float
    rids: list[str] = msgspec.field(default_factory=list)  # the system's request ids (hand-off flows)
    failed: bool = False

    @property
    def kind(self) -> str:
        """decode (every row fed one token), extend (none did: prompts or hand-off catch-ups) or mixed."""
        if self.decode_rows == self.rows:
            return "decode"
        return "extend" if self.decode_rows == 0 else "mixed"


class BatchRecorder:
    """One model's records, at most `cap`; `pending` holds those not yet shipped (`take()`)."""

    def __init__(self, model: int, cap: int) -> None:
        self.model = model
        self.cap = cap
        self.count = 0
        self.pending: list[BatchRecord] = []
        self._steps: deque[tuple[float, float]] = deque(maxlen=RECENT_STEPS)  # (launch, end) of recent batches

    @property
    def full(self) -> bool:
        return self.count >= self.cap

    def record(self, launch: float, end: float, engine_s: float, ready_since: list[float], rids: list[str],
               input_lens: list[int], committed: int, handoffs: int, threshold: int, ready: int, active: int,
               forced: bool, failed: bool = False) -> None:
        """Record a batch whose rows became ready at `ready_since` and fed `input_lens` tokens each."""
        wait = busy = longest = 0.0
        steps = self._steps
        for since in ready_since:
            waited = launch - since
            wait += waited
            longest = max(longest, waited)
            for start, stop in reversed(steps):  # newest first: stop at the first step before the row was ready
                if stop <= since:
                    break
                busy += min(stop, launch) - max(start, since)
        steps.append((launch, end))
        if self.count >= self.cap:
            return
        self.count += 1
        decode = sum(1 for n in input_lens if n == 1)
        self.pending.append(BatchRecord(self.model, launch, end, engine_s, len(rids), decode, sum(input_lens),
                                        committed, handoffs, threshold, ready, active, forced, wait, longest,
                                        busy, rids, failed))

    def take(self) -> list[BatchRecord]:
        out, self.pending = self.pending, []
        return out


@dataclass
class RequestSpan:
    """A finished request as the trace draws it (GenerationResult without its tokens)."""

    index: int
    arrival: float
    first_token: float | None
    finish: float
    finish_reason: str
    commits: list[tuple[float, int, str]]  # GenerationResult.commits
    handoffs: int = 0
    rid: str | None = None  # the system's request id, which its batch records name (None: it has none)

    @classmethod
    def of(cls, result: GenerationResult, rid: str | None = None) -> RequestSpan:
        return cls(result.index, result.arrival_s, result.first_token_s, result.finish_s, result.finish_reason,
                   list(result.commits), result.handoffs, rid)


@dataclass
class TraceLog:
    """What a system collected while tracing: every model's batch records (in arrival order) and the requests
    that finished, with the system's request ids. `driver`: lock-step runs every model in one driver thread
    (drawn as one process, a track per model); None: a process per model."""

    models: list[str]
    cap: int
    system: str
    driver: str | None = None
    batches: list[BatchRecord] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    requests: list[RequestSpan] = field(default_factory=list)
    request_cap: int = 0  # 0: same as cap

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.models)
        self.request_cap = self.request_cap or self.cap
        self._since = float("-inf")

    def add(self, records: list[BatchRecord]) -> None:
        for r in records:
            self.counts[r.model] += 1
            if r.launch >= self._since:
                self.batches.append(r)

    def finished(self, result: GenerationResult, rid: str | None = None) -> None:
        if len(self.requests) < self.request_cap and result.arrival_s >= self._since:
            self.requests.append(RequestSpan.of(result, rid))

    def start_window(self, now: float) -> None:
        """Keep only what starts from `now` on (the bench calls it after its warm-up requests)."""
        self._since = now
        self.batches = [b for b in self.batches if b.launch >= now]
        self.requests = [r for r in self.requests if r.arrival >= now]

    def capped(self) -> list[str]:
        """The models whose recorder reached the cap (later batches of theirs are not in the trace)."""
        return [m for m, n in zip(self.models, self.counts, strict=True) if n >= self.cap]
