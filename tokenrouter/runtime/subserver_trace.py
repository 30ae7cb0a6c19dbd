"""runtime.trace in a subserver: what a batch's record needs from its launch and from its end.

Why apart from the step loop (runtime/subserver.py): tracing is off by default; the loop holds one `None`
check per batch, and what a record reads (the scheduler's queue at launch, each row's input length) lives
here. The records ride to the front end with the next Report (`SubserverIO.flush`).
"""

from __future__ import annotations

import time

from tokenrouter.engine.base import StepItem
from tokenrouter.runtime.scheduler import Entry, Scheduler
from tokenrouter.trace.record import BatchRecorder


class TracedBatch:
    """A batch from its launch to its record: when each row became ready, the queue length (the batch's rows
    included) and whether the max-wait bound forced the launch below the threshold, taken at launch."""

    __slots__ = ("recorder", "sched", "batch", "launched", "since", "ready", "forced")

    def __init__(self, recorder: BatchRecorder, sched: Scheduler, batch: list[Entry], launched: float) -> None:
        ready, waiting = sched.queue_lengths()
        ready += len(batch)
        self.recorder = recorder
        self.sched = sched
        self.batch = batch
        self.launched = launched
        self.since = [e.since for e in batch]
        self.ready = ready
        self.forced = not sched.launches(ready + waiting)

    def record(self, items: list[StepItem], engine_s: float, committed: int, handoffs: int, active: int,
               failed: bool = False) -> None:
        """The batch is done (stepped, routed and settled; `failed`: its engine step or route() failed): record
        it with its rows' inputs `items`, at the global active count `active`."""
        self.recorder.record(self.launched, time.perf_counter(), engine_s, self.since,
                             [e.req.rid for e in self.batch], [len(it.token_ids) for it in items], committed,
                             handoffs, self.sched.threshold, self.ready, active, self.forced, failed)
