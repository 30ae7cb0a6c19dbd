"""`system=lockstep`: the official R2R implementation's execution semantics on our engines and algorithms.

Why: it isolates what the TokenRouter runtime itself buys. Same engines, same algorithm classes, same
route/send/receive calls, so greedy outputs equal TokenRouter's; only the schedule differs. One driver, in
one process, per iteration steps every active request on the entry model, routes, sends the routed rows to
their peer (an extend of the unseen suffix + one token), waits for that step, and only then takes the next
entry-model step. No delayed batching, no asynchrony between models. With more than two models, or symmetric
algorithms (R-Stitch) where a request may stay on a peer, each iteration steps each model once, in order.

Admission reserves each request's worst-case KV on every model it may visit (runtime/admission.py, the
subserver scheduler's rule), so however many requests arrive at once no step overflows a pool.

The routing algorithm is guarded as in the TokenRouter runtime (runtime/plugin_guard.py): a plugin call that
raises or returns what the protocol cannot use fails only the requests of that call, blaming the algorithm;
route() has runtime.route_timeout_s (checked when it returns: the driver is a thread), and a request may go
runtime.max_handoffs_per_token hand-offs without a committed token.

The driver is one thread that loops over rounds by itself (the asyncio loop only hands it requests and gets
results back), so the baseline pays no event-loop hop per round; new requests join between rounds.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tokenrouter import handoff
from tokenrouter.algorithms import build_algorithm
from tokenrouter.api import RouterRequest, RoutingAlgorithm, StepResult
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.base import Engine, EngineFailure, StepItem
from tokenrouter.engine.factory import build_engine, close_engines, prepare_models
from tokenrouter.engine.remote import RemoteEngine
from tokenrouter.errors import UserError
from tokenrouter.finish import banned_ids
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.runtime.admission import KVBudget
from tokenrouter.runtime.plugin_guard import (
    RouteClock,
    RouteOverBudget,
    algorithm_error,
    call_failure,
    destinations,
    handoff_loop,
)
from tokenrouter.stats import ModelCounters
from tokenrouter.system import ServingSystem, SystemSetup
from tokenrouter.trace.record import BatchRecorder, TraceLog

DRIVER = "lock-step driver"


@dataclass
class _Active:
    """One request in flight: every model's local view of it and what that model's KV already holds."""

    req: GenerationRequest
    rid: str
    future: asyncio.Future
    views: list[RouterRequest | None]
    fed: list[int]  # per model: how many of its view's tokens its engine's KV holds
    reserved: list[int] = field(default_factory=list)  # per model: worst-case KV reserved at admission
    at: int = 0  # the model holding the request now
    committed: list[int] = field(default_factory=list)  # per model: tokens it committed
    handoffs: int = 0
    stalled: int = 0  # hand-offs since its last committed token (runtime.max_handoffs_per_token)
    arrival_s: float = 0.0
    first_token_s: float | None = None
    commits: list[tuple[float, int, str]] = field(default_factory=list)  # GenerationResult.commits
    finish_s: float = 0.0
    finish_reason: str | None = None  # set once finished
    error: str | None = None
    ready_s: float = 0.0  # runtime.trace: when its current model could next step it (admission, its last step)


@dataclass
class _ModelStats(ModelCounters):
    rows: int = 0  # requests summed over steps: recorded as their mean per step
    busy_s: float = 0.0  # engine time, as the runtime's `busy_s` (mean step = busy_s / steps)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["mean_batch_size"] = out.pop("rows") / self.steps if self.steps else 0.0
        return out


class LockstepSystem(ServingSystem):
    """Lock-step token-level routing over in-process engines (see the module docstring)."""

    def __init__(self, models: list[ModelSpec], algorithm: AlgorithmSpec, runtime: RuntimeConfig,
                 engine_processes: str = "auto") -> None:
        self.specs = list(models)
        self.engine_processes = engine_processes
        self.model_names = [m.name for m in models]
        self.algorithm_spec = algorithm
        self.runtime = runtime
        self.engines: list[Engine] = []
        self.algorithms: list[RoutingAlgorithm] = []
        self._budgets: list[KVBudget] = []
        self._stats = [_ModelStats() for _ in models]
        self._inbox: queue.SimpleQueue[_Active | None] = queue.SimpleQueue()  # None: stop the driver
        self._active: list[_Active] = []
        self._driver: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_id = 0
        self._closed = False
        self._dead: str | None = None  # why the driver stopped, if it failed
        self._trace = TraceLog(self.model_names, runtime.trace_max_batches, "lockstep", DRIVER) \
            if runtime.trace else None
        self._recorders = [BatchRecorder(m, runtime.trace_max_batches) for m in range(len(models))] \
            if runtime.trace else []
        # route()'s budget, checked when it returns: the driver is a thread, and an interrupt would land on the
        # event loop's thread instead
        self._clocks = [RouteClock(runtime.route_timeout_s, interrupt=False) for _ in models]

    # -- life cycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        # Build algorithms first: a bad algorithm name or parameter fails fast, before loading weights.
        self.algorithms = [build_algorithm(self.algorithm_spec.name, i, self.model_names, self.algorithm_spec.params)
                           for i in range(len(self.specs))]
        self.specs = await asyncio.to_thread(prepare_models, self.specs)
        await asyncio.to_thread(self._build_engines)
        for algo, engine in zip(self.algorithms, self.engines, strict=True):
            algo.bind(engine)
        self._budgets = [KVBudget(e.tokens_free() + e.tokens_used(), s.page_size)
                         for e, s in zip(self.engines, self.specs, strict=True)]
        self._loop = asyncio.get_running_loop()
        self._driver = threading.Thread(target=self._drive, name="lockstep-driver", daemon=True)
        self._driver.start()

    def _build_engines(self) -> None:
        """Every model's engine, each peer in a process of its own where `own_processes` says so; a failed
        build closes what was built (a live engine would keep its GPU memory from the sweep's next job)."""
        where = own_processes(self.specs, self.engine_processes)
        try:
            for spec, own in zip(self.specs, where, strict=True):
                self.engines.append(RemoteEngine(spec) if own else build_engine(spec))
        except BaseException:
            close_engines(self.engines)
            raise

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._driver is not None:
            self._inbox.put(None)
            await asyncio.to_thread(self._driver.join)
        while not self._inbox.empty():
            leftover = self._inbox.get()
            if leftover is not None:
                self._active.append(leftover)
        for a in self._active:
            if not a.future.done():
                a.future.set_exception(RuntimeError("lockstep system closed"))
        # routers hold device tensors and the engines' embeddings: drop them too, then free the memory
        self.algorithms = []
        engines, self.engines = self.engines, []
        close_engines(engines)

    # -- client API -------------------------------------------------------------------------------------
    async def generate(self, req: GenerationRequest) -> GenerationResult:
        if self._driver is None or self._closed or self._dead:
            raise RuntimeError(self._dead or "lockstep system is not running (call start() first)")
        rid = f"ls-{self._next_id}"
        self._next_id += 1
        n = len(self.specs)
        view = RouterRequest(rid, list(req.prompt_ids), max_new_tokens=req.max_new_tokens,
                             sampling=req.sampling, seed=req.seed, min_new_tokens=req.min_new_tokens)
        active = _Active(req, rid, asyncio.get_running_loop().create_future(), [view] + [None] * (n - 1),
                         [0] * n, committed=[0] * n, arrival_s=time.perf_counter())
        self._inbox.put(active)
        if self._dead:  # the driver failed between the check above and the put: nobody will serve it
            raise RuntimeError(self._dead)
        return await active.future

    def trace_log(self) -> TraceLog | None:
        return self._trace

    def stats(self) -> dict:
        return {"system": "lockstep",
                "models": {name: s.to_dict() for name, s in zip(self.model_names, self._stats, strict=True)}}

    # -- driver (its own thread: engine steps never block the event loop) -----------------------------
    def _drive(self) -> None:
        waiting: list[_Active] = []
        try:
            while self._round(waiting):
                pass
        except BaseException as exc:  # a broken engine, a driver bug, a plugin's BaseException: fail every request
            self._dead = f"lockstep driver failed: {type(exc).__name__}: {exc}"
            while True:  # and those put in the inbox before _dead was set (generate() checks it after its put)
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    waiting.append(item)
            for a in self._active + waiting:
                self._fail_now(a, self._dead)
            self._active = []

    def _round(self, waiting: list[_Active]) -> bool:
        """One round: take new requests (blocking only when idle), admit them, step. False once told to stop."""
        try:
            item = self._inbox.get(block=not (self._active or waiting))
            while True:
                if item is None:
                    self._active += waiting
                    return False
                waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass
        waiting[:] = self._admit(waiting)
        if self._active:
            self._iteration(self._active)
        for a in [a for a in self._active if a.finish_reason is not None]:
            self._active.remove(a)
            self._deliver(a)
        return True

    def _fail_now(self, a: _Active, error: str) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(lambda: a.future.done() or a.future.set_exception(RuntimeError(error)))

    def _deliver(self, a: _Active) -> None:
        assert self._loop is not None
        result = self._result(a)
        if self._trace is not None:
            self._trace.finished(result, a.rid)
        self._loop.call_soon_threadsafe(lambda: a.future.done() or a.future.set_result(result))

    def _admit(self, waiting: list[_Active]) -> list[_Active]:
        """Move waiting requests into the batch, oldest first, while the batch has room and every model can
        reserve their worst-case KV; returns those still waiting."""
        for i, a in enumerate(waiting):
            prompt, max_new = len(a.req.prompt_ids), a.req.max_new_tokens
            errors = [f"model {name!r}: {e}" for name, b in zip(self.model_names, self._budgets, strict=True)
                      if (e := b.never_fits(prompt, max_new))]
            if not prompt or errors:
                self._fail(a, "empty prompt" if not prompt else errors[0])
                self._deliver(a)
                continue
            needs = [b.need(prompt, max_new) for b in self._budgets]
            if len(self._active) >= self.runtime.max_batch_size or not self._reserve(needs):
                return waiting[i:]
            a.reserved = needs
            a.ready_s = time.perf_counter()
            self._active.append(a)
        return []

    def _reserve(self, needs: list[int]) -> bool:
        """Reserve on every model or on none."""
        if not all(b.fits(n) for b, n in zip(self._budgets, needs, strict=True)):
            return False
        for b, n in zip(self._budgets, needs, strict=True):
            b.try_reserve(n)
        return True

    def _unreserve(self, a: _Active) -> None:
        for m, n in enumerate(a.reserved):
            self._budgets[m].release(n)
        a.reserved = []

    def _iteration(self, active: list[_Active]) -> None:
        """One lock-step round (worker thread): each model steps the requests it holds, in model order."""
        for m in range(len(self.engines)):
            rows = [a for a in active if a.at == m and a.finish_reason is None]
            for chunk in self._chunks(rows, m):
                self._step_isolated(m, chunk)

    def _step_isolated(self, m: int, chunk: list[_Active]) -> None:
        """`_step`; where the engine step fails, each request steps again alone from where its KV was, so only the
        request that makes a step fail (a bad sampling parameter, a token id a peer's send() made up) fails, as in
        a subserver."""
        try:
            self._step(m, chunk)
        except EngineFailure:  # the engine is gone (a TP rank, its own process): no request can be served any more
            raise
        except _EngineStepFailed as failed:
            if len(chunk) == 1:
                self._fail(chunk[0], self._step_error(m, failed.cause))
                return
            engine = self.engines[m]
            for a in chunk:  # (an EngineFailure here, too, ends the driver)
                if engine.seq_len(a.rid) > a.fed[m]:
                    engine.truncate(a.rid, a.fed[m])
                self._step_isolated(m, [a])
        except Exception as exc:  # noqa: BLE001 - a bug after the step: its requests fail, the others go on
            for a in chunk:
                if a.finish_reason is None:
                    self._fail(a, self._step_error(m, exc))

    def _chunks(self, rows: list[_Active], m: int) -> list[list[_Active]]:
        """Split a model's rows so no step exceeds the token budget (a prefill can be long)."""
        chunks: list[list[_Active]] = []
        budget = self.runtime.max_step_tokens
        used = 0
        for a in rows:
            need = self._new_tokens(a, m)
            if chunks and used + need <= budget and len(chunks[-1]) < self.runtime.max_batch_size:
                chunks[-1].append(a)
                used += need
            else:
                chunks.append([a])
                used = need
        return chunks

    def _new_tokens(self, a: _Active, m: int) -> int:
        view = a.views[m]
        assert view is not None
        start = handoff.step_start(a.fed[m], view.seq_len)
        if start < a.fed[m]:
            a.fed[m] = start
            self.engines[m].truncate(a.rid, start)
        return view.seq_len - a.fed[m]

    def _step(self, m: int, rows: list[_Active]) -> None:
        launched = time.perf_counter()
        engine, algo = self.engines[m], self.algorithms[m]
        views = [a.views[m] for a in rows]
        items = [StepItem(a.rid, v.tokens[a.fed[m]:], v.sampling,
                          banned_ids=banned_ids(v.position, v.min_new_tokens, self._stop_ids(a)))
                 for a, v in zip(rows, views, strict=True)]
        stats = self._stats[m]
        committed, handoffs, t0 = stats.tokens_committed, stats.handoffs_sent, time.perf_counter()
        try:
            out = engine.step(items, algo.needs.step_outputs)
        except EngineFailure:
            raise
        except Exception as exc:
            raise _EngineStepFailed(exc) from exc
        engine_s = time.perf_counter() - t0
        for a, v in zip(rows, views, strict=True):
            a.fed[m] = v.seq_len
        self._stats[m].steps += 1
        self._stats[m].busy_s += engine_s
        self._stats[m].rows += len(rows)
        dests = self._route(m, rows, StepResult(m, views, list(out.next_tokens), out.logits, out.hidden))
        for a, view, token, dest in zip(rows, views, out.next_tokens, dests, strict=True):
            if dest is None:  # the algorithm failed it
                continue
            try:  # keeps_token(), the algorithm's, on a hand-off
                settled = handoff.settle(algo, view, dest, int(token), self._stop_ids(a))
            except Exception as exc:
                self._fail(a, self._algorithm_error(m, call_failure("keeps_token()", exc)))
                continue
            if settled.committed:
                self._committed(a, m)
            if settled.finish:
                self._finish(a, settled.finish)
            elif settled.peer is not None:
                self._hand_off(a, m, settled.peer)
        if self._trace is not None:
            self._trace_step(m, rows, items, launched, engine_s, stats.tokens_committed - committed,
                             stats.handoffs_sent - handoffs)

    def _route(self, m: int, rows: list[_Active], step: StepResult) -> list[int | None]:
        """route() under the plugin guard, as in a subserver: per row its destination, or None where the algorithm
        failed the row (it is failed). A route() that raises is asked again row by row, so only the rows it fails
        on fail; one past runtime.route_timeout_s fails them all (asking again would stall every request again)."""
        try:
            return list(destinations(self._clocks[m].call(self.algorithms[m].route, step), len(rows),
                                     len(self.engines)))
        except RouteOverBudget:
            error = self._algorithm_error(m, self._clocks[m].overrun)
            for a in rows:
                self._fail(a, error)
            return [None] * len(rows)
        except Exception as exc:
            if len(rows) == 1:
                self._fail(rows[0], self._algorithm_error(m, call_failure("route()", exc)))
                return [None]
        return [self._route(m, [a], _one_row(step, i))[0] for i, a in enumerate(rows)]

    def _step_error(self, m: int, exc: Exception) -> str:
        return f"model {self.model_names[m]!r} step failed: {type(exc).__name__}: {exc}"

    def _algorithm_error(self, m: int, what: str) -> str:
        return algorithm_error(self.algorithms[m].name, self.model_names[m], what)

    def _trace_step(self, m: int, rows: list[_Active], items: list[StepItem], launched: float, engine_s: float,
                    committed: int, handoffs: int) -> None:
        """runtime.trace: the step's record; each row is ready again (on whichever model holds it) from now."""
        assert self._trace is not None
        end = time.perf_counter()
        recorder = self._recorders[m]
        recorder.record(launched, end, engine_s, [a.ready_s for a in rows], [a.rid for a in rows],
                        [len(it.token_ids) for it in items], committed, handoffs, 0, len(rows), len(self._active),
                        False)
        self._trace.add(recorder.take())
        for a in rows:
            a.ready_s = end

    def _stop_ids(self, a: _Active) -> list[int] | tuple[int, ...]:
        return a.req.stop_token_ids if a.req.stop_token_ids is not None else self.engines[0].eos_token_ids

    def _committed(self, a: _Active, m: int) -> None:
        a.committed[m] += 1
        a.stalled = 0
        self._stats[m].tokens_committed += 1
        now = time.perf_counter()
        a.commits.append((now, 1, self.model_names[m]))
        if a.first_token_s is None:
            a.first_token_s = now

    def _hand_off(self, a: _Active, src: int, dest: int) -> None:
        """Hand `a` from model `src` to `dest`; fail it instead when the algorithm's send() or receive() fails, or
        when it went runtime.max_handoffs_per_token hand-offs without a committed token (it would loop forever)."""
        if a.stalled >= self.runtime.max_handoffs_per_token:
            self._fail(a, self._algorithm_error(src, handoff_loop(a.stalled)))
            return
        view = a.views[src]
        assert view is not None
        try:
            peer, valid = handoff.deliver(self.algorithms[src], self.algorithms[dest], view, a.views[dest])
        except handoff.PluginCallFailed as failed:
            self._fail(a, self._algorithm_error(failed.model, call_failure(failed.call, failed.cause)))
            return
        a.views[dest] = peer
        if a.fed[dest] > valid:  # the peer's KV holds tokens the message replaced: roll back
            a.fed[dest] = valid
            self.engines[dest].truncate(a.rid, valid)
        a.at = dest
        a.handoffs += 1
        a.stalled += 1
        self._stats[src].handoffs_sent += 1

    def _finish(self, a: _Active, reason: str) -> None:
        a.finish_reason = reason
        a.finish_s = time.perf_counter()
        self._unreserve(a)
        for m, engine in enumerate(self.engines):
            if a.views[m] is not None:
                engine.release(a.rid)

    def _fail(self, a: _Active, error: str) -> None:
        a.error = error
        for m, engine in enumerate(self.engines):
            if a.views[m] is not None:
                try:
                    engine.release(a.rid)
                except Exception:  # noqa: BLE001 - the engine is already broken; the error is recorded
                    pass
        a.finish_reason = "error"
        a.finish_s = time.perf_counter()
        self._unreserve(a)

    def _result(self, a: _Active) -> GenerationResult:
        view = a.views[a.at]
        assert view is not None
        return GenerationResult(
            index=a.req.index,
            prompt_ids=list(a.req.prompt_ids),
            output_ids=list(view.output_ids),
            finish_reason=a.finish_reason or "error",
            tokens_per_model={name: c for name, c in zip(self.model_names, a.committed, strict=True)},
            handoffs=a.handoffs,
            arrival_s=a.arrival_s,
            first_token_s=a.first_token_s,
            finish_s=a.finish_s,
            error=a.error,
            commits=a.commits,
        )


class _EngineStepFailed(Exception):
    """The engine's step raised `cause`: the rows' KV may hold part of the step."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _one_row(step: StepResult, i: int) -> StepResult:
    """Row `i` of a step, as route() would see it had the request stepped alone."""
    return StepResult(step.model_index, step.requests[i:i + 1], step.next_tokens[i:i + 1],
                      None if step.logits is None else step.logits[i:i + 1],
                      None if step.hidden is None else step.hidden[i:i + 1])


ENGINE_PROCESSES = ("auto", "shared", "own")


def own_processes(specs: list[ModelSpec], mode: str = "auto") -> list[bool]:
    """Per model, whether its engine runs in a process of its own (engine/remote.py). The entry model is always
    the driver's (its router reads its hidden states, logits and embedding every step). `auto`: a peer on the
    sglang engine gets its own (SGLang allows one engine per process), others share the driver's; `shared` /
    `own`: every peer in the driver's process / in its own."""
    if mode not in ENGINE_PROCESSES:
        raise UserError(f"system.engine_processes must be one of {ENGINE_PROCESSES}, got {mode!r}")
    return [i > 0 and (mode == "own" or (mode == "auto" and s.engine == "sglang")) for i, s in enumerate(specs)]


def from_setup(setup: SystemSetup) -> LockstepSystem:
    setup.unknown_fields({"engine_processes"})
    if len(setup.models) < 2:
        raise UserError("system=lockstep needs at least two models (use system=single for one)")
    mode = str(setup.system.get("engine_processes", "auto"))
    own_processes(setup.models, mode)  # a bad value: one line now, before anything loads
    return LockstepSystem(setup.models, setup.algorithm, setup.runtime, mode)
