"""Continuous batching on one engine: every request submitted at once, waiting ones join as others finish.

Why here and not in the runtime: `tokenrouter generate`, `tokenrouter profile` and the engine benchmark need
single-model batched generation without subserver processes. Admission reserves each request's whole KV
(prompt + max_new_tokens, rounded up to pages), so a running request can never run out of KV mid-way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from tokenrouter.engine.base import NO_STEP_OUTPUTS, Engine, SamplingParams, StepItem
from tokenrouter.errors import CapacityError, UserError
from tokenrouter.finish import finish_reason


@dataclass
class Job:
    """One prompt to complete."""

    prompt_ids: list[int]
    max_new_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_ids: tuple[int, ...] = ()


@dataclass
class Finished:
    index: int
    output_ids: list[int]
    finish_reason: str  # "stop" | "length"


def run_batch(engine: Engine, jobs: list[Job], max_batch_size: int = 64) -> Iterator[Finished]:
    """Generate all `jobs`, yielding each as it finishes (not in input order). Each step is one engine
    forward over the new requests' prompts and the running requests' last tokens."""
    if max_batch_size <= 0:
        raise UserError(f"max batch size must be positive, got {max_batch_size}")
    page = int(getattr(engine, "page_size", 1))
    capacity = engine.tokens_free() + engine.tokens_used()

    def reservation(job: Job) -> int:  # the KV never holds the last sampled token
        return -(-(len(job.prompt_ids) + job.max_new_tokens - 1) // page) * page

    for i, job in enumerate(jobs):
        if not job.prompt_ids:
            raise UserError(f"prompt {i} is empty")
        if job.max_new_tokens < 1:
            raise UserError(f"max new tokens must be >= 1, got {job.max_new_tokens}")
        if reservation(job) > capacity:
            raise CapacityError(
                f"prompt {i}: {len(job.prompt_ids)} prompt + {job.max_new_tokens} new tokens exceed the KV pool "
                f"of {capacity} tokens; shorten it or enlarge the pool (--kv-tokens)"
            )
    waiting = deque(range(len(jobs)))
    running: dict[int, list[int]] = {}  # index -> output ids so far
    reserved = 0
    try:
        while waiting or running:
            items = [StepItem(str(i), out[-1:], jobs[i].sampling) for i, out in running.items()]
            while waiting and len(running) < max_batch_size and reserved + reservation(jobs[waiting[0]]) <= capacity:
                i = waiting.popleft()
                reserved += reservation(jobs[i])
                running[i] = []
                items.append(StepItem(str(i), list(jobs[i].prompt_ids), jobs[i].sampling))
            result = engine.step(items, NO_STEP_OUTPUTS)  # tokens only
            for rid, token in zip(result.rids, result.next_tokens, strict=True):
                i = int(rid)
                out = running[i]
                out.append(token)
                reason = finish_reason(token, len(out), jobs[i].max_new_tokens, jobs[i].stop_ids)
                if reason:
                    del running[i]
                    reserved -= reservation(jobs[i])
                    engine.release(rid)
                    yield Finished(i, out, reason)
    finally:
        for i in running:
            engine.release(str(i))
