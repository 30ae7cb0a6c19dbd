"""The front end's client API: submit, stream, abort and results over the subservers (supervisor.py).

Why a thin front end: each model steps at its own pace in its own process; the front end only admits
requests to the entry model, keeps the global active count N (and the thresholds for it) in sync across
subservers, and reassembles each request's output from whichever models committed its tokens. Tokens carry
their output index, so chunks from different models may arrive out of order and still land right. A
subserver that dies fails every in-flight request with a clear error (RuntimeFailure) and the front end
shuts itself down. A request the routing algorithm failed (a plugin bug, a route() over its time budget) fails
alone with an AlgorithmFailure; `algorithm_trouble()` keeps such failures visible (GET /health: degraded).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tokenrouter.algorithms import algorithm_class, build_algorithm
from tokenrouter.api import AlgorithmFailure
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.factory import prepare_models
from tokenrouter.engine.loader import check_source
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.runtime.messages import (
    INT64_MAX,
    INT64_MIN,
    OUT_HIDDEN,
    OUT_LOGITS,
    TOKEN_ID_LIMIT,
    Abort,
    Active,
    Message,
    Report,
    RequestMeta,
    StatsRequest,
    Submit,
    encode,
)
from tokenrouter.runtime.supervisor import RuntimeFailure, Subservers
from tokenrouter.runtime.threshold_planner import (
    AutoThresholds,
    plan_launch_rules,
    startup_profiles,
    workload_context,
)
from tokenrouter.runtime.thresholds import ThresholdTable
from tokenrouter.stats import RuntimeModelStats, RuntimeStats, SubserverCounters
from tokenrouter.system import ServingSystem
from tokenrouter.trace.record import TraceLog

log = logging.getLogger(__name__)

__all__ = ["AlgorithmFailure", "RequestError", "RuntimeFailure", "StreamEvent", "TokenRouterFrontend"]

DEGRADED_S = 60.0  # an algorithm failure keeps the server "degraded" (GET /health) this long


class RequestError(UserError):
    """The runtime rejected or failed one request (e.g. it can never fit in a model's KV pool)."""


@dataclass
class StreamEvent:
    """Newly committed tokens of one request, in order; the last event carries the result."""

    token_ids: list[int]
    result: GenerationResult | None = None
    model: str = ""  # the model that committed these tokens (a stream cut short counts tokens per model)


@dataclass
class AlgorithmTrouble:
    """What the routing algorithm got wrong while serving: requests it failed (of them, by route() calls over
    runtime.route_timeout_s) and the last error."""

    failed_requests: int = 0
    route_over_budget: int = 0
    last_error: str = ""
    last_at: float = -math.inf  # time.monotonic()


@dataclass
class _Flight:
    """One in-flight request on the front end."""

    req: GenerationRequest
    rid: str
    arrival: float
    num_models: int
    output: list[int] = field(default_factory=list)
    early: dict[int, tuple[list[int], int]] = field(default_factory=dict)  # (ids, model) ahead of their turn
    per_model: list[int] = field(default_factory=list)
    first_token: float | None = None
    commits: list[tuple[float, int, str]] = field(default_factory=list)  # GenerationResult.commits
    final: tuple[str, int, int] | None = None  # (reason, output length, hand-offs)
    extra: dict[str, Any] = field(default_factory=dict)  # the finishing step's logits / hidden, if asked
    events: asyncio.Queue | None = None
    future: asyncio.Future | None = None

    def __post_init__(self) -> None:
        self.per_model = [0] * self.num_models


class TokenRouterFrontend(ServingSystem):
    """Client API over the subservers. Use `async with TokenRouterFrontend(...) as router:`. It is what
    `tokenrouter serve` serves: it implements the HTTP server's `FrontEnd` (tokenrouter/server/frontend_api.py)
    structurally, since the runtime never imports the server."""

    def __init__(self, models: list[ModelSpec], algorithm: AlgorithmSpec, runtime: RuntimeConfig | None = None,
                 seed: int = 0) -> None:
        if not models:
            raise UserError("models: need at least one model")
        self.models = list(models)
        self.model_names = [m.name for m in self.models]
        self.algorithm = _checked_algorithm(algorithm, self.models)
        self.runtime = runtime or RuntimeConfig()
        self.seed = seed
        self.thresholds = ThresholdTable(self.runtime.thresholds, len(self.models), self.runtime.delayed_batching)
        self.thresholds_source = "fixed" if self.runtime.delayed_batching else "delayed batching off: all ones"
        self.launch_rules: dict[int, list[int]] = {}  # runtime.policy=optimal: N -> per-model launch bitmasks
        self.latency_profiles: dict[str, dict[str, Any]] = {}  # model -> start-up profile (latency_profile: auto)
        self.subservers: Subservers | None = None
        self._flights: dict[str, _Flight] = {}
        self._rids = itertools.count()
        self._stats_seq = 0
        self._counters = [SubserverCounters() for _ in self.models]
        self._tasks: list[asyncio.Task] = []
        self._started = False
        self._closed = False
        self._closed_event = asyncio.Event()
        self._vocab = 0
        self._eos: list[int] = []
        self._trace = TraceLog(self.model_names, self.runtime.trace_max_batches, "tokenrouter") \
            if self.runtime.trace else None
        self._trouble = AlgorithmTrouble()

    @property
    def pids(self) -> list[int]:
        """Process ids of the subservers (index = model index)."""
        return [] if self.subservers is None else [p.pid for p in self.subservers.procs]

    @property
    def socket_dir(self) -> Path | None:
        """The private directory holding the ipc:// socket files (None with tcp or when closed)."""
        return None if self.subservers is None else self.subservers.socket_dir

    @property
    def eos_token_ids(self) -> list[int]:
        """The entry model's EOS ids, the default stop tokens (known once started; the HTTP server reports
        them so an external dispatcher, e.g. Std. Serving, can stop like TokenRouter does)."""
        return list(self._eos)

    @property
    def failure(self) -> str | None:
        """Why the runtime stopped serving (a subserver died, start-up failed); None while healthy."""
        return None if self.subservers is None else self.subservers.failure

    def health_problem(self) -> str | None:
        """None when every subserver is up and serving, else why not."""
        if self.subservers is None:
            return "the front end is closed" if self._closed else "starting"
        return self.subservers.health_problem()

    def algorithm_trouble(self) -> dict[str, Any] | None:
        """The routing algorithm's failures while serving, if it failed a request in the last DEGRADED_S seconds
        (GET /health then says `degraded`: the server serves, but some requests fail): the counts since
        start-up, the last error and how long ago."""
        t = self._trouble
        ago = time.monotonic() - t.last_at
        if ago > DEGRADED_S:
            return None
        return {"name": self.algorithm.name, "failed_requests": t.failed_requests,
                "route_over_budget": t.route_over_budget, "last_error": t.last_error, "seconds_ago": round(ago, 1)}

    async def wait_closed(self) -> None:
        """Return once the front end is closed, by close() or because a subserver died (see `failure`)."""
        await self._closed_event.wait()

    # ---- life cycle ----------------------------------------------------------------------------------------

    def calibrate(self, requests: list[GenerationRequest], texts: list[str]) -> None:
        """Before start(): a benchmark's whole workload sets `runtime.auto_context_tokens` (unless configured),
        so thresholds=auto plans on the step times at the workload's mean context."""
        if self.runtime.auto_context_tokens is None and requests:
            tokens = workload_context([len(r.prompt_ids) for r in requests], [r.max_new_tokens for r in requests])
            self.runtime = replace(self.runtime, auto_context_tokens=tokens)

    async def start(self) -> None:
        """Spawn one subserver per model and wait until every one has built its engine."""
        if self._started:
            return
        self._started = True
        # downloads and the memory plan come first: the start-up timeout below covers loading alone
        self.models = await asyncio.to_thread(prepare_models, self.models)
        rt = self.runtime
        profiles = startup_profiles(self.models, rt)  # decided here, once; each subserver is told its answer
        auto = AutoThresholds(self.models, self.algorithm, rt.auto_max_concurrency, rt.auto_context_tokens) \
            if rt.thresholds == "auto" and rt.delayed_batching else None
        if auto is not None and not any(profiles):  # search (or read the disk cache) off the loop
            self.thresholds, self.thresholds_source = await auto.plan()
        self.subservers = Subservers(self.models, self.algorithm, rt, self._on_report, self._on_death, profiles)
        try:
            ready = await self.subservers.start()
            measured = [r.profile for r in ready]
            self.latency_profiles = {m.name: p for m, p in zip(self.models, measured, strict=True) if p}
            if auto is not None:
                await self._auto_after_ready(auto, measured, planned=any(profiles))
            if rt.policy == "optimal" and rt.delayed_batching:
                await self._plan_rules(measured)
        except BaseException:
            await self.close()
            raise
        self.subservers.connect()
        self._vocab = min(r.vocab_size for r in ready)
        self._eos = list(ready[0].eos_ids)

    async def _auto_after_ready(self, auto: AutoThresholds, measured: list[dict[str, Any] | None],
                                planned: bool) -> None:
        """thresholds=auto once every subserver is up: plan from their start-up profiles (`planned`: start() had
        them measured), and keep re-planning from measured routing rates if the algorithm's rates follow them."""
        if planned:
            self.thresholds, self.thresholds_source = await auto.plan(measured)
        if auto.can_retune(measured):
            self._tasks.append(asyncio.create_task(auto.retune(measured, self._routes, lambda: self.thresholds,
                                                               self._adopt)))

    async def _plan_rules(self, measured: list[dict[str, Any] | None]) -> None:
        """runtime.policy=optimal: the per-N launch rules sent with every Active (none: the thresholds decide)."""
        rt = self.runtime
        rules, why = await asyncio.to_thread(plan_launch_rules, self.models, self.algorithm, rt.auto_max_concurrency,
                                             measured, rt.auto_context_tokens)
        if rules is None:
            log.warning("runtime.policy=optimal: %s; using thresholds", why)
        self.launch_rules = rules or {}

    def _routes(self) -> list[list[int]]:
        """Decisions counted so far: routes[i][j] = requests model i sent to model j."""
        return [list(c.routes or [0] * len(self.models)) for c in self._counters]

    def _adopt(self, table: ThresholdTable | None, source: str) -> None:
        if table is not None:
            self.thresholds = table
            self._broadcast_active()
        self.thresholds_source = source

    async def close(self) -> None:
        """Shut every subserver down and remove the socket directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._fail_all(RuntimeFailure(self.failure or "the front end was closed"))
        if self.subservers is not None:
            await self.subservers.close()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        for task in self._tasks:
            if task is not current:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._closed_event.set()

    async def _on_death(self, failure: str) -> None:
        self._fail_all(RuntimeFailure(failure))
        await self.close()

    # ---- client API ----------------------------------------------------------------------------------------
    async def generate(self, req: GenerationRequest) -> GenerationResult:
        flight = self._submit(req, stream=False)
        assert flight.future is not None
        try:
            return await asyncio.shield(flight.future)
        except asyncio.CancelledError:
            self._abort(flight)
            raise

    async def stream(self, req: GenerationRequest) -> AsyncGenerator[StreamEvent, None]:
        flight = self._submit(req, stream=True)
        assert flight.events is not None
        try:
            while True:
                ev = await flight.events.get()
                if isinstance(ev, BaseException):
                    raise ev
                yield ev
                if ev.result is not None:
                    return
        finally:
            if flight.rid in self._flights:
                self._abort(flight)

    async def generate_many(self, reqs: list[GenerationRequest]) -> list[GenerationResult]:
        """All requests at once; results in request order. Raises the first failure."""
        return list(await asyncio.gather(*(self.generate(r) for r in reqs)))

    def batching_thresholds(self, n: int) -> list[int]:
        return list(self.thresholds(n))

    def trace_log(self) -> TraceLog | None:
        return self._trace

    def statistics(self) -> RuntimeStats:
        """Per model: steps, mean batch size, tokens committed, hand-offs sent, measured routing counts and
        rates per destination, busy time, mean queue wait per request-step (ready -> launched: what delayed
        batching costs), loop overhead median, current threshold; plus the active count N and the routing
        algorithm's failures since start-up (/metrics: `tokenrouter_algorithm_failed_requests`,
        `tokenrouter_route_over_budget`)."""
        n = len(self._flights)
        current = self.thresholds(n)
        models = {name: RuntimeModelStats.of(c, self.model_names, current[i])
                  for i, (name, c) in enumerate(zip(self.model_names, self._counters, strict=True))}
        return RuntimeStats(models, n, current, self.thresholds.spec, self.thresholds_source,
                            dict(self.latency_profiles), self.launch_rules.get(n), self._trouble.failed_requests,
                            self._trouble.route_over_budget)

    def stats(self) -> dict[str, Any]:
        """statistics() as summary.json records it."""
        return self.statistics().to_dict()

    async def refresh_stats(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """stats() after every subserver has reported its current counters (stats() alone may lag by a
        few ms: counters ride along with other traffic at most every 20 ms)."""
        if self._closed or self.subservers is None or not self.subservers.outboxes:
            return self.stats()
        self._stats_seq += 1
        self.subservers.send_all([StatsRequest(self._stats_seq)])
        deadline = time.monotonic() + timeout_s
        while any(c.seq < self._stats_seq for c in self._counters) and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        return self.stats()

    # ---- internals -----------------------------------------------------------------------------------------

    def _submit(self, req: GenerationRequest, stream: bool) -> _Flight:
        """Admit one request. Everything that can reject it (validation, the wire encoding) happens before
        it is counted active; a send that still fails undoes the accounting, so no slot ever leaks."""
        group = self.subservers
        if self._closed or group is None or not group.outboxes:
            raise RuntimeFailure(self.failure or "the front end is not running (call start() first)")
        _check_request(req, self._vocab)
        rid = str(next(self._rids))
        sampling = req.sampling
        stop = self._eos if req.stop_token_ids is None else list(req.stop_token_ids)
        outputs = (OUT_LOGITS if req.return_logits else 0) | (OUT_HIDDEN if req.return_hidden else 0)
        meta = RequestMeta(req.max_new_tokens, sampling, _routing_seed(req.seed, self.seed), stop, outputs,
                           req.min_new_tokens)
        try:
            frame = encode([Submit(rid, list(req.prompt_ids), meta)])
        except (OverflowError, TypeError, ValueError) as exc:
            raise RequestError(f"request cannot be encoded for the runtime: {exc}") from None
        flight = _Flight(req, rid, time.perf_counter(), len(self.models))
        if stream:
            flight.events = asyncio.Queue()
        else:
            flight.future = asyncio.get_running_loop().create_future()
        self._flights[rid] = flight
        try:
            self._broadcast_active()
            group.send(0, frame)
        except BaseException as exc:
            self._flights.pop(rid, None)
            with contextlib.suppress(Exception):
                self._broadcast_active()
            raise RuntimeFailure(f"cannot submit the request to model {self.model_names[0]!r}: {exc}") from None
        return flight

    def _abort(self, flight: _Flight) -> None:
        if self._flights.pop(flight.rid, None) is None or self._closed:
            return
        self._broadcast_active()
        self._send_all([Abort(flight.rid)])

    def _broadcast_active(self) -> None:
        n = len(self._flights)
        self._send_all([Active(n, self.thresholds(n), self.launch_rules.get(n))])

    def _send_all(self, msgs: list[Message]) -> None:
        if self.subservers is not None:
            self.subservers.send_all(msgs)

    def _on_report(self, msg: Report) -> None:
        now = time.perf_counter()
        if msg.stats is not None:
            self._counters[msg.model] = SubserverCounters.from_wire(msg.stats)
        if msg.trace and self._trace is not None:
            self._trace.add(msg.trace)
        for rid, start, ids in msg.chunks:
            flight = self._flights.get(rid)
            if flight is None:
                continue  # aborted
            flight.per_model[msg.model] += len(ids)
            if start != len(flight.output):
                flight.early[start] = (list(ids), msg.model)
                continue
            pieces, end = [(list(ids), msg.model)], start + len(ids)
            while end in flight.early:
                pieces.append(flight.early.pop(end))
                end += len(pieces[-1][0])
            if flight.first_token is None:
                flight.first_token = now
            for new, model in pieces:
                flight.output += new
                flight.commits.append((now, len(new), self.model_names[model]))
                if flight.events is not None:
                    flight.events.put_nowait(StreamEvent(new, model=self.model_names[model]))
            if flight.final is not None:
                self._maybe_finish(flight, now)
        for rid, logits, hidden in msg.outputs:
            flight = self._flights.get(rid)
            if flight is not None:
                flight.extra.update({"logits": logits, "hidden": hidden})
        for rid, reason, length, handoffs in msg.finishes:
            flight = self._flights.get(rid)
            if flight is not None:
                flight.final = (reason, length, handoffs)
                self._maybe_finish(flight, now)
        for rid, error in msg.failures:
            self._fail(rid, RequestError(error))
        if msg.algorithm_failures or msg.over_budget:
            t = self._trouble
            t.failed_requests += len(msg.algorithm_failures)
            t.route_over_budget += msg.over_budget
            t.last_at = time.monotonic()
            for rid, error in msg.algorithm_failures:
                t.last_error = error
                self._fail(rid, AlgorithmFailure(error))

    def _fail(self, rid: str, exc: BaseException) -> None:
        flight = self._flights.pop(rid, None)
        if flight is not None:
            self._broadcast_active()
            self._deliver_error(flight, exc)

    def _maybe_finish(self, flight: _Flight, now: float) -> None:
        assert flight.final is not None
        reason, length, handoffs = flight.final
        if len(flight.output) < length:
            return  # a chunk from another model is still on its way
        del self._flights[flight.rid]
        self._broadcast_active()
        req = flight.req
        result = GenerationResult(
            index=req.index, prompt_ids=list(req.prompt_ids), output_ids=flight.output[:length],
            finish_reason=reason, tokens_per_model=dict(zip(self.model_names, flight.per_model, strict=True)),
            handoffs=handoffs, arrival_s=flight.arrival, first_token_s=flight.first_token, finish_s=now,
            extra=flight.extra, commits=flight.commits,
        )
        if self._trace is not None:
            self._trace.finished(result, flight.rid)
        if flight.events is not None:
            flight.events.put_nowait(StreamEvent([], result))
        elif flight.future is not None and not flight.future.done():
            flight.future.set_result(result)

    def _deliver_error(self, flight: _Flight, exc: BaseException) -> None:
        if flight.events is not None:
            flight.events.put_nowait(exc)
        elif flight.future is not None and not flight.future.done():
            flight.future.set_exception(exc)

    def _fail_all(self, exc: BaseException) -> None:
        flights, self._flights = list(self._flights.values()), {}
        for flight in flights:
            self._deliver_error(flight, exc)


TOKEN_ID_MAX = TOKEN_ID_LIMIT - 1


def _checked_algorithm(algorithm: AlgorithmSpec, models: list[ModelSpec]) -> AlgorithmSpec:
    """The algorithm with its parameters resolved (Hub routers: local now), built once per model to check them:
    bad parameters, model or router files are one line now, and so is a plugin whose constructor raises."""
    for model in models:
        if model.engine == "torch":
            check_source(model.source)  # tp: loader.check_tp, in start() (engine/factory.py:prepare_models)
    names = [m.name for m in models]
    try:
        params = algorithm_class(algorithm.name).resolve_params(dict(algorithm.params))
        for i in range(len(models)):
            build_algorithm(algorithm.name, i, names, params).check()
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"algorithm {algorithm.name!r} failed to build: {type(exc).__name__}: {exc}") from None
    return AlgorithmSpec(algorithm.name, params)


def _check_request(req: GenerationRequest, vocab: int) -> None:
    """The request fields the runtime's wire format and engines rely on, each with a one-line reason."""
    if not req.prompt_ids:
        raise RequestError("request has an empty prompt")
    if not 1 <= req.max_new_tokens <= TOKEN_ID_MAX:
        raise RequestError(f"max_new_tokens must be in [1, {TOKEN_ID_MAX}], got {req.max_new_tokens}")
    bad = [t for t in req.prompt_ids if not 0 <= t < vocab]
    if bad:
        raise RequestError(f"prompt token id(s) {bad[:5]} outside the vocabulary [0, {vocab})")
    bad = [t for t in req.stop_token_ids or [] if not 0 <= t <= TOKEN_ID_MAX]
    if bad:
        raise RequestError(f"stop token id(s) {bad[:5]} outside [0, {TOKEN_ID_MAX}]")
    if not INT64_MIN <= req.seed <= INT64_MAX:
        raise RequestError(f"seed must be a 64-bit signed integer, got {req.seed}")
    s = req.sampling
    if s.seed is not None and not INT64_MIN <= s.seed <= INT64_MAX:
        raise RequestError(f"sampling seed must be a 64-bit signed integer, got {s.seed}")
    if not -1 <= s.top_k <= TOKEN_ID_MAX:
        raise RequestError(f"top_k must be in [-1, {TOKEN_ID_MAX}], got {s.top_k}")
    if not (math.isfinite(s.temperature) and s.temperature >= 0.0):
        raise RequestError(f"temperature must be a finite number >= 0, got {s.temperature}")
    if not (math.isfinite(s.top_p) and 0.0 < s.top_p <= 1.0):
        raise RequestError(f"top_p must be in (0, 1], got {s.top_p}")


def _routing_seed(request_seed: int, run_seed: int) -> int:
    """The per-request routing seed: the run's seed in the high bits, kept inside the wire's 64 bits."""
    return (request_seed + (run_seed << 32)) % 2**64
