"""One model's subserver: its engine, scheduler and side of the routing algorithm in one process.

Why one process and one loop per model: models step at their own pace (no global lock-step), and a step
never waits on another model. Each iteration: (1) drain client, peer and control frames without blocking;
(2) delayed-batching schedule and one engine step, then route(); (3) hand-offs to peers (the request goes
PENDING here, its KV kept), committed tokens and finishes to the front end, releases to peers. A request
back from a peer rejoins with its step input tokens[kv_len:], an extend over exactly what this model missed.
When nothing is due the loop blocks on its sources (epoll with a timeout; `runtime.spin_us` spins first).

The routing algorithm is a plugin: every call into it (route(), keeps_token(), send(), receive()) and every
result it returns is guarded, so a bug in it fails only the requests of that call (an AlgorithmFailure, HTTP
500) and the process and every other request go on. route() runs under a time budget (runtime.route_timeout_s,
RouteClock) and a request may be handed off only so often without a committed token
(runtime.max_handoffs_per_token).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgpack
import msgspec
import zmq

from tokenrouter import handoff
from tokenrouter.algorithms import build_algorithm
from tokenrouter.api import PeerRequest, RouterRequest, RoutingAlgorithm, StepResult
from tokenrouter.children import die_with_parent
from tokenrouter.config import AUTO_PROFILE, ModelSpec, RuntimeConfig
from tokenrouter.engine.base import Engine, EngineFailure, StepItem, StepOutputName, StepOutputs
from tokenrouter.errors import UserError
from tokenrouter.finish import banned_ids
from tokenrouter.heap import freeze_startup
from tokenrouter.runtime import unix_link
from tokenrouter.runtime.fd_poll import FdPoller
from tokenrouter.runtime.ipc import (
    CurveKeys,
    PushLink,
    bind_inbox,
    connect_outbox,
    remove_dir,
    start_authenticator,
)
from tokenrouter.runtime.messages import (
    OUT_HIDDEN,
    OUT_LOGITS,
    Abort,
    Active,
    Fatal,
    Message,
    PeerMessage,
    Peers,
    Ready,
    Report,
    Shutdown,
    StatsRequest,
    Submit,
    decode,
    encode,
)
from tokenrouter.runtime.scheduler import Entry, Scheduler
from tokenrouter.runtime.unix_link import Link, LinkClosed, Listener
from tokenrouter.stats import SubserverCounters
from tokenrouter.trace.record import BatchRecorder

IDLE_POLL_MS = 500  # idle wake-up period: notice a dead parent
BACKLOG_POLL_MS = 1  # a direct link the kernel did not take everything for is retried this often
ABORT_MEMORY_S = 60.0  # how long an aborted id is remembered (late peer frames for it are dropped)
STATS_PERIOD_S = 0.02  # counters ride to the front end at most this often (finishes always carry them)
MEDIAN_PERIOD_S = 0.2  # overhead median recomputed at most this often
SPIN_CPU_SHARE = 0.8  # runtime.spin_us: a spin that ran less than this share of its wall time was contended
SPIN_BACKOFF_S = 0.02  # ... and spinning pauses this long
TRACE_SHIP_BATCHES = 64  # runtime.trace: records ride with the next Report, or alone once this many wait
ERROR_CHARS = 300  # an algorithm's error as a client sees it: one line, at most this long


class RouteOverBudget(BaseException):
    """Raised into a route() call that ran past runtime.route_timeout_s. A BaseException, so that a plugin's own
    `except Exception` cannot swallow it."""


class RouteClock:
    """runtime.route_timeout_s: a one-shot SIGALRM timer armed around each route() call but the process's first
    interrupts one that runs past the budget (a sleep, a Python loop; code stuck inside one C call is interrupted when it returns to
    Python). Two setitimer calls per step. Where signals cannot be handled (a subserver off the main thread, in a
    benchmark) and where a plugin swallowed the interrupt, the call's duration is checked after it returns. Another
    user of the timer in the process (a test runner's timeout) keeps its deadline and its handler."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._first = True  # the first call is not timed: lazy start-up (CUDA handles, compiled kernels) is not a bug
        self._armed = False
        self._timer = budget_s > 0 and threading.current_thread() is threading.main_thread()
        self._previous: Any = None
        if self._timer:
            self._previous = signal.signal(signal.SIGALRM, self._expired)

    def _expired(self, signum: int, frame: Any) -> None:
        if self._armed:  # a signal that lands after the call returned is not ours
            self._armed = False
            raise RouteOverBudget
        if callable(self._previous):
            self._previous(signum, frame)

    def call(self, route: Callable[[StepResult], Any], step: StepResult) -> Any:
        """`route(step)`, or RouteOverBudget if it ran past the budget."""
        if self.budget_s <= 0 or self._first:
            self._first = False
            return route(step)
        start = time.perf_counter()
        other = 0.0
        if self._timer:
            self._armed = True
            other = signal.setitimer(signal.ITIMER_REAL, self.budget_s)[0]
        try:
            dests = route(step)
        finally:
            if self._timer:
                self._armed = False
                later = max(other - (time.perf_counter() - start), 1e-6) if other else 0.0
                signal.setitimer(signal.ITIMER_REAL, later)
        if time.perf_counter() - start > self.budget_s:
            raise RouteOverBudget
        return dests


def destinations(dests: Any, count: int, num_models: int) -> list[int]:
    """route()'s result as one model index (a plain int) per request, or ProtocolError saying what is wrong with
    it. `bytes()` checks every element in C (an integer, numpy's and torch's included, in [0, 256)): ~2 us for a
    batch of 256, where a Python loop over the requests would cost several times that on every step."""
    try:
        dests = dests if type(dests) is list else list(dests)
    except TypeError:
        raise handoff.ProtocolError(f"route() returned {type(dests).__name__}, not a list of model indices") from None
    if len(dests) != count:
        raise handoff.ProtocolError(f"route() returned {len(dests)} destinations for {count} requests")
    try:
        packed = bytes(dests)
    except (TypeError, ValueError):
        packed = None
    if packed is not None and (not packed or max(packed) < num_models):
        return list(packed)
    indices = [_index(d) for d in dests]
    bad = next((d for d in indices if not 0 <= d < num_models), None)
    if bad is not None:
        raise handoff.ProtocolError(f"route() returned destination {bad} ({num_models} models)")
    return indices  # more than 256 models


def _index(dest: Any) -> int:
    try:
        return int(dest.__index__())
    except (AttributeError, TypeError, ValueError, RuntimeError):  # a float, a string, a float tensor
        raise handoff.ProtocolError(f"route() returned destination {dest!r:.40}, not a model index") from None


_PEER_REQUEST = msgspec.msgpack.Decoder(PeerRequest)
_ENCODE = msgspec.msgpack.Encoder().encode


def check_wire(msg: PeerRequest) -> None:
    """A message from an overriding send() as the peer will decode it: wrong field types or values msgpack cannot
    carry would otherwise fail the whole frame at the peer, and with it every hand-off it holds."""
    try:
        _PEER_REQUEST.decode(_ENCODE(msg))
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError) as exc:
        raise handoff.ProtocolError(f"send() built a message no peer can read: {exc}") from None


def one_line(text: str, limit: int = ERROR_CHARS) -> str:
    """`text` on one line, at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass
class SubserverConfig:
    """Everything a subserver process needs, sent to it as one msgpack blob (no pickle of our objects)."""

    index: int
    models: list[dict[str, Any]]
    algorithm: str
    algorithm_params: dict[str, Any]
    runtime: dict[str, Any]
    frontend: str  # the front end's inbox endpoint
    transport: str  # "ipc" | "tcp"
    where: str  # ipc: private dir; tcp: host to bind
    curve: dict[str, str] | None = None  # tcp: the run's CURVE keys (CurveKeys fields); stdin only, never logged

    @property
    def keys(self) -> CurveKeys | None:
        return None if self.curve is None else CurveKeys(**self.curve)

    def to_blob(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)

    @classmethod
    def from_blob(cls, blob: bytes) -> SubserverConfig:
        return cls(**msgpack.unpackb(blob, raw=False))


class Counters:
    """Per-model counters the front end shows in stats() (routes: measured routing rates per destination)."""

    def __init__(self, num_models: int) -> None:
        self.steps = 0
        self.batch_total = 0
        self.committed = 0
        self.handoffs = 0
        self.step_s = 0.0
        self.wait_s = 0.0  # summed over request-steps: ready here -> its batch launched (delayed batching's cost)
        self.routes = [0] * num_models
        self.seq = 0  # last StatsRequest answered
        self.overhead_us: deque[float] = deque(maxlen=4096)
        self._overhead_p50 = 0.0
        self._computed_at = 0.0

    def snapshot(self, now: float, occupancy: dict[str, int]) -> SubserverCounters:
        """The counters as reported, with the scheduler's `occupancy()` (requests waiting, KV reserved)."""
        if self.overhead_us and now - self._computed_at >= MEDIAN_PERIOD_S:
            self._overhead_p50 = statistics.median(self.overhead_us)
            self._computed_at = now
        return SubserverCounters(self.steps, self.batch_total, self.committed, self.handoffs, self.routes,
                                 self.step_s, self.wait_s, self._overhead_p50, self.seq, **occupancy)


class Subserver:
    def __init__(self, cfg: SubserverConfig, engine: Engine, algo: RoutingAlgorithm, ctx: zmq.Context,
                 inbox: zmq.Socket, to_frontend: PushLink | Link, listener: Listener | None = None) -> None:
        self.index = cfg.index
        self.num_models = len(cfg.models)
        self.algorithm_name = cfg.algorithm
        spec = ModelSpec.from_dict(cfg.models[cfg.index])
        rt = RuntimeConfig.from_dict(cfg.runtime)
        self.engine = engine
        self.algo = algo
        self.ctx = ctx
        self.inbox = inbox
        self.inbox_fd: int = inbox.getsockopt(zmq.FD)  # signals a state change: drain reads ZMQ_EVENTS
        self.to_frontend = to_frontend
        self.peers: dict[int, PushLink | Link] = {}
        self.listener = listener  # direct peer links (ipc mode); None: peers reach us through the zmq inbox
        self.links_in: list[Link] = []
        self.where = cfg.where
        self.poller = FdPoller()
        self.keys = cfg.keys
        capacity = engine.tokens_free() + engine.tokens_used()
        self.sched = Scheduler(capacity, spec.page_size, rt.max_batch_size, rt.max_step_tokens,
                               rt.max_wait_ms / 1000.0)
        self.counters = Counters(self.num_models)
        self.aborted: dict[str, float] = {}
        self.stopping = False
        self.parent = os.getppid()
        self._report = Report(self.index)
        self._stats_dirty = False
        self._stats_sent = 0.0
        self._outbox: dict[int, list[Message]] = {}
        self._events: Collection[int] | None = None  # descriptors the last poll reported (None: look at every source)
        self.spin_s = rt.spin_us / 1e6
        self._spin_off_until = 0.0  # perf_counter time before which spin() does not spin (contention)
        self.step_outputs = algo.needs.step_outputs  # what route() reads; requests may ask for more (Submit)
        self.active_n = 0  # the global active count N (last Active)
        self.tracer = BatchRecorder(self.index, rt.trace_max_batches) if rt.trace else None
        self.clock = RouteClock(rt.route_timeout_s)
        self.max_stalled = rt.max_handoffs_per_token
        self.check_sends = type(algo).send is not RoutingAlgorithm.send  # the default send() needs no wire check
        self._logged: set[tuple[str, str]] = set()  # (call, exception type) whose traceback went to stderr

    # ---- stage 1: receive ----------------------------------------------------------------------------------

    def drain(self, events: Collection[int] | None) -> None:
        """The frames waiting on the sources `events` (a poll's descriptors) names: the front end's zmq inbox,
        the listener, the peers' direct links; every source when None. Reading only what poll reported saves a
        syscall and an EAGAIN per idle source per iteration, on the path of every hand-off."""
        if events is None or self.inbox_fd in events:
            while self.inbox.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                self.on_frame(self.inbox.recv(zmq.NOBLOCK))
        if self.listener is not None and (events is None or self.listener.fileno() in events):
            for link in self.listener.accept():
                self.links_in.append(link)
                self.poller.register(link.fileno())
        for link in list(self.links_in):
            if events is not None and link.fileno() not in events:
                continue
            try:
                frames = link.recv_frames()
            except LinkClosed:  # a peer exited (its death is the front end's to report)
                self.poller.unregister(link.fileno())
                self.links_in.remove(link)
                link.close()
                continue
            for frame in frames:
                self.on_frame(frame)

    def on_frame(self, frame: bytes) -> None:
        try:
            msgs = decode(frame)
        except ValueError as exc:  # never die on a frame that is not ours: drop it, say so
            print(f"subserver {self.engine.name!r}: dropped a {len(frame)}-byte frame: {exc}", file=sys.stderr)
            return
        for msg in msgs:
            try:
                self.handle(msg)
            except Exception as exc:  # well-formed but nonsensical (wrong field types): the same
                print(f"subserver {self.engine.name!r}: dropped a {type(msg).__name__} message: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr)

    def handle(self, msg: Message) -> None:
        now = time.perf_counter()
        if isinstance(msg, PeerMessage):
            self.on_peer(msg, now)
        elif isinstance(msg, Submit):
            req = msg.meta.view(msg.rid, msg.prompt_ids)
            self.admit(Entry(req, msg.meta, stop_ids=frozenset(msg.meta.stop_ids)), now)
        elif isinstance(msg, Active):
            self.active_n = msg.n
            self.sched.threshold = max(1, msg.thresholds[self.index])
            self.sched.launch_mask = msg.launch[self.index] if msg.launch else None
        elif isinstance(msg, Peers):
            for i, endpoint in enumerate(msg.endpoints):
                if i != self.index and i not in self.peers:
                    self.peers[i] = self.connect_peer(i, endpoint)
        elif isinstance(msg, Abort):
            self.aborted[msg.rid] = now
            self.drop(msg.rid)
        elif isinstance(msg, Shutdown):
            self.stopping = True
        elif isinstance(msg, StatsRequest):
            self.counters.seq = msg.seq
            self._stats_dirty = True
            self._stats_sent = float("-inf")  # answer with this iteration's flush

    def connect_peer(self, index: int, endpoint: str) -> PushLink | Link:
        """A direct unix link to the peer's listener in ipc mode (unless runtime.peer_link=zmq), else a zmq
        PUSH to its inbox (tcp: CURVE-authenticated)."""
        if self.listener is not None:
            return unix_link.connect(unix_link.peer_path(self.where, index))
        return PushLink(connect_outbox(self.ctx, endpoint, self.keys))

    def admit(self, e: Entry, now: float) -> None:
        error = self.sched.add(e, now)
        if error:
            self.fail(e.req.rid, f"model {self.engine.name!r}: {error}", e)

    def on_peer(self, pm: PeerMessage, now: float) -> None:
        msg = pm.msg
        e = self.sched.entries.get(msg.rid)
        if msg.finished:
            self.drop(msg.rid)
            return
        if e is None:
            if pm.meta is None or msg.rid in self.aborted:
                return  # a request this model never had, or one the client aborted
            req = handoff.first_contact(msg, pm.meta.max_new_tokens, pm.meta.sampling, pm.meta.seed,
                                        pm.meta.min_new_tokens)
            e = Entry(req, pm.meta, handoffs=pm.handoffs, stalled=pm.stalled, stop_ids=frozenset(pm.meta.stop_ids))
            if self.received(e, msg, pm.sender) is not None:
                self.admit(e, now)  # on failure the sender is told to release it too
            return
        valid = self.received(e, msg, pm.sender)
        if valid is None:
            return
        kv = self.engine.seq_len(msg.rid)
        if kv > valid:
            self.engine.truncate(msg.rid, valid)
            kv = valid
        e.handoffs, e.stalled = pm.handoffs, pm.stalled
        self.sched.make_ready([e], now, max(1, e.req.seq_len - kv))

    def received(self, e: Entry, msg: PeerRequest, sender: int) -> int | None:
        """The algorithm's receive() of `msg` (handoff.receive: the KV truncation point), or None when it raised:
        the request then fails here and the sender is told to release it."""
        try:
            return handoff.receive(self.algo, msg, e.req, sender)
        except Exception as exc:
            e.req.peer_seen.setdefault(sender, 0)
            self.fail(e.req.rid, self.plugin_error("receive()", exc), e, algorithm=True)
            return None

    # ---- stage 2: schedule and step ------------------------------------------------------------------------

    def run_batch(self, batch: list[Entry]) -> None:
        """Step `batch`, route, and settle each request (commit and stream, finish, stay ready or hand off).
        Both loops run per request per step, on the path of every batch and every hand-off: one pass each, no
        comprehension frames, helpers only where a rule lives (handoff, finish)."""
        launched = time.perf_counter()
        at_launch = self.launch_facts(batch) if self.tracer is not None else None
        engine = self.engine
        reqs: list[RouterRequest] = []
        kv_before: list[int] = []
        items: list[StepItem] = []
        waited = 0.0
        asked = 0  # outputs a finishing request's client asked for (RequestMeta.outputs bits)
        for e in batch:
            req = e.req
            rid, prompt, output = req.rid, req.prompt_ids, req.output_ids
            plen = len(prompt)
            kv = engine.seq_len(rid)
            start = handoff.step_start(kv, plen + len(output))
            if start < kv:
                engine.truncate(rid, start)
            reqs.append(req)
            kv_before.append(kv)
            # the input is tokens[start:]: decode = 1 token, prefill = the prompt, extend = what was missed away
            ids = output[start - plen:] if start >= plen else prompt[start:] + output
            banned = banned_ids(len(output), req.min_new_tokens, e.stop_ids) if req.min_new_tokens else ()
            items.append(StepItem(rid, ids, req.sampling, plen, banned))
            waited += launched - e.since
            asked |= e.meta.outputs
        self.counters.wait_s += waited
        t0 = time.perf_counter()
        try:
            out = self.engine.step(items, self.outputs_for(asked))
        except EngineFailure:
            raise  # the engine is gone (a TP rank died): stop, the front end fails every request
        except Exception as exc:  # a failed step fails its requests, never the server or their batch mates
            self.step_failed(batch, items, at_launch, launched, t0)
            self.isolate(batch, kv_before, f"{type(exc).__name__}: {exc}", algorithm=False)
            return
        try:
            dests = destinations(self.clock.call(self.algo.route, StepResult(self.index, reqs, out.next_tokens,
                                                                             out.logits, out.hidden)),
                                 len(batch), self.num_models)
        except RouteOverBudget:  # stepping each alone would stall the model once per request: all of them fail
            self.step_failed(batch, items, at_launch, launched, t0)
            self._report.over_budget += 1
            error = self.algorithm_error(f"route() ran past runtime.route_timeout_s={self.clock.budget_s:g} s")
            print(f"subserver {self.engine.name!r}: {error}; {len(batch)} request(s) failed", file=sys.stderr)
            for e in batch:
                self.fail(e.req.rid, error, algorithm=True)
            return
        except Exception as exc:  # a router can fail on one request's input: the others must not fail with it
            self.step_failed(batch, items, at_launch, launched, t0)
            self.isolate(batch, kv_before, self.plugin_error("route()", exc), algorithm=True)
            return
        engine_s = time.perf_counter() - t0
        self.counters.step_s += engine_s
        c = self.counters
        committed, handoffs = c.committed, c.handoffs
        c.steps += 1
        c.batch_total += len(batch)
        now = time.perf_counter()
        algo, routes, chunks = self.algo, c.routes, self._report.chunks
        stays: list[Entry] = []
        for row, (e, tok, dest) in enumerate(zip(batch, out.next_tokens, dests, strict=True)):
            routes[dest] += 1
            req = e.req
            try:  # keeps_token(), the algorithm's, on a hand-off
                settled = handoff.settle(algo, req, dest, int(tok), e.stop_ids)
            except Exception as exc:
                self.fail(req.rid, self.plugin_error("keeps_token()", exc), algorithm=True)
                continue
            if settled.committed:  # stream it, with its output index: chunks of two models may arrive out of order
                chunks.append((req.rid, len(req.output_ids) - 1, req.output_ids[-1:]))
                c.committed += 1
                e.stalled = 0
            if settled.finish:
                if e.meta.outputs:
                    self._report.outputs.append((req.rid, _row(out.logits, row, e.meta.outputs & OUT_LOGITS),
                                                 _row(out.hidden, row, e.meta.outputs & OUT_HIDDEN)))
                self.finish(e, settled.finish)
            elif settled.peer is None:
                stays.append(e)
            else:
                self.hand_off(e, settled.peer)
        self.sched.make_ready(stays, now)
        if at_launch is not None:
            self.trace_batch(at_launch, batch, items, launched, engine_s, c.committed - committed,
                             c.handoffs - handoffs)

    def launch_facts(self, batch: list[Entry]) -> tuple[list[float], int, bool]:
        """runtime.trace, at a batch's launch: when each row became ready, the queue length (the batch's rows
        included) and whether the max-wait bound forced the launch below the threshold."""
        sched = self.sched
        ready, waiting = sched.queue_lengths()
        ready += len(batch)
        return [e.since for e in batch], ready, not sched.launches(ready + waiting)

    def trace_batch(self, at_launch: tuple[list[float], int, bool], batch: list[Entry], items: list[StepItem],
                    launched: float, engine_s: float, committed: int, handoffs: int, failed: bool = False) -> None:
        assert self.tracer is not None
        since, ready, forced = at_launch
        self.tracer.record(launched, time.perf_counter(), engine_s, since, [e.req.rid for e in batch],
                           [len(it.token_ids) for it in items], committed, handoffs, self.sched.threshold, ready,
                           self.active_n, forced, failed)

    def outputs_for(self, asked: int) -> StepOutputs:
        """What this step must return: what the algorithm reads, plus what the batch's clients `asked` for
        (`RequestMeta.outputs` bits: Std. Serving's dispatcher, /generate's return_logits)."""
        if not asked:
            return self.step_outputs
        return self.step_outputs | {name for bit, name in _OUTPUT_BITS if asked & bit}

    def step_failed(self, batch: list[Entry], items: list[StepItem], at_launch: tuple[list[float], int, bool] | None,
                    launched: float, t0: float) -> None:
        """A step whose engine or route() failed: its time counted, its batch traced as failed."""
        self.counters.step_s += time.perf_counter() - t0
        if at_launch is not None:
            self.trace_batch(at_launch, batch, items, launched, time.perf_counter() - t0, 0, 0, failed=True)

    def isolate(self, batch: list[Entry], kv_before: list[int], error: str, algorithm: bool) -> None:
        """After a failed step: roll every member's KV back to where it was and step each one alone, so only
        the request that makes a step fail (a bad sampling parameter, a router error on its input) fails.
        `algorithm`: route() failed (the server's fault), else the engine step (the request's)."""
        for e, kv in zip(batch, kv_before, strict=True):
            if self.engine.seq_len(e.req.rid) > kv:
                self.engine.truncate(e.req.rid, kv)
        if len(batch) == 1:
            text = error if algorithm else f"model {self.engine.name!r}: step failed: {error}"
            self.fail(batch[0].req.rid, text, algorithm=algorithm)
            return
        for e in batch:
            self.run_batch([e])

    def algorithm_error(self, what: str) -> str:
        """The one line a request failed by the routing algorithm reports (the client sees it in a 500)."""
        return one_line(f"routing algorithm {self.algorithm_name!r} failed on model {self.engine.name!r}: {what}")

    def plugin_error(self, call: str, exc: Exception) -> str:
        """algorithm_error() for a plugin call that raised or returned what the runtime cannot use; the line goes
        to stderr too, with the traceback the first time this call fails with this exception type."""
        what = str(exc) if isinstance(exc, handoff.ProtocolError) else f"{call} raised {type(exc).__name__}: {exc}"
        error = self.algorithm_error(what)
        print(f"subserver {self.engine.name!r}: {error}", file=sys.stderr)
        key = (call, type(exc).__name__)
        if key not in self._logged and not isinstance(exc, handoff.ProtocolError):
            self._logged.add(key)
            traceback.print_exception(exc, file=sys.stderr)
        return error

    def finish(self, e: Entry, reason: str) -> None:
        self._report.finishes.append((e.req.rid, reason, len(e.req.output_ids), e.handoffs))
        self.drop(e.req.rid)

    def hand_off(self, e: Entry, dest: int) -> None:
        """Send `e` to model `dest`; fail it instead when the algorithm's send() raises or builds a message no
        peer can use, or when `e` went runtime.max_handoffs_per_token hand-offs without a committed token."""
        if e.stalled >= self.max_stalled:
            self.fail(e.req.rid, self.algorithm_error(
                f"the request was handed off {e.stalled} times without a committed token "
                "(runtime.max_handoffs_per_token)"), algorithm=True)
            return
        try:
            out = handoff.hand_off(self.algo, e.req, dest)
            if self.check_sends:
                check_wire(out.msg)
        except Exception as exc:
            self.fail(e.req.rid, self.plugin_error("send()", exc), algorithm=True)
            return
        e.handoffs += 1
        e.stalled += 1
        self.counters.handoffs += 1
        self.sched.pend(e)
        self._outbox.setdefault(dest, []).append(PeerMessage(out.msg, self.index, e.handoffs,
                                                             e.meta if out.first else None, e.stalled))

    def drop(self, rid: str, unregistered: Entry | None = None) -> None:
        """Forget a request here and tell every peer that has seen it to do the same."""
        e = self.sched.remove(rid) or unregistered
        self.engine.release(rid)
        if e is None:
            return
        for peer in e.req.peer_seen:
            release = PeerRequest(rid, 0, [], len(e.req.prompt_ids), finished=True)
            self._outbox.setdefault(peer, []).append(PeerMessage(release, self.index, e.handoffs))

    def fail(self, rid: str, error: str, unregistered: Entry | None = None, algorithm: bool = False) -> None:
        """Fail one request: the request's own fault, or (`algorithm`) the routing algorithm's."""
        (self._report.algorithm_failures if algorithm else self._report.failures).append((rid, error))
        self.drop(rid, unregistered)

    # ---- stage 3: send -------------------------------------------------------------------------------------

    def flush(self, now: float) -> None:
        if self._outbox:
            self.flush_peers()
        r = self._report
        failed = r.failures or r.algorithm_failures
        if self._stats_dirty and (r.finishes or failed or now - self._stats_sent >= STATS_PERIOD_S):
            r.stats = self.counters.snapshot(now, self.sched.occupancy()).to_wire()
            self._stats_dirty = False
            self._stats_sent = now
        tracer = self.tracer
        if tracer is not None and tracer.pending and (r.chunks or r.finishes or failed or r.stats
                                                      or len(tracer.pending) >= TRACE_SHIP_BATCHES):
            r.trace = tracer.take()
        if r.chunks or r.finishes or failed or r.stats or r.trace or r.over_budget:
            try:
                self.to_frontend.send(encode([r]))
            except LinkClosed:  # the front end is gone: nobody to serve
                self.stopping = True
            self._report = Report(self.index)

    def flush_peers(self) -> None:
        """Hand-offs and releases first: they are on the critical path of the requests' next tokens."""
        waiting: dict[int, list[Message]] = {}
        for peer, msgs in self._outbox.items():
            link = self.peers.get(peer)
            if link is None:  # a peer's hand-off can overtake the front end's Peers message (another
                waiting[peer] = msgs  # connection): answer it once Peers is here, which wakes this loop
                continue
            try:
                link.send(encode(msgs))
            except LinkClosed:  # the peer is gone; the front end sees it die and fails its requests
                pass
        self._outbox = waiting

    def _stats_due_in(self, now: float) -> float | None:
        return max(0.0, self._stats_sent + STATS_PERIOD_S - now) if self._stats_dirty else None

    # ---- loop ----------------------------------------------------------------------------------------------

    def flush_backlogs(self) -> bool:
        """Write what the kernel did not take last time to each direct link; True while some remains."""
        pending = False
        for link in (*self.peers.values(), self.to_frontend):
            if link.backlog:
                with contextlib.suppress(LinkClosed):
                    link.flush()
                pending = pending or link.backlog
        return pending

    def run(self) -> None:
        self.listen()
        while not self.stopping:
            self.iterate()

    def listen(self) -> None:
        """Register the inbox and the listener with the poller (before the first `iterate()`)."""
        self.poller.register(self.inbox_fd)
        if self.listener is not None:
            self.poller.register(self.listener.fileno())

    def iterate(self, block: bool = True) -> None:
        """One pass of the loop: drain what the last poll reported, step a batch if one is due and send what it
        produced (else what is queued), then one poll: for nothing if more work is due (`timeout_ms`), else
        (when `block`) until a frame arrives or a timer is due, sooner while a direct link holds a backlog."""
        start = time.perf_counter()
        self.drain(self._events)
        batch = self.sched.next_batch(start)
        if batch:
            step_before = self.counters.step_s
            self.run_batch(batch)
            self._stats_dirty = True
            end = time.perf_counter()
            self.flush(end)
            self.counters.overhead_us.append(((end - start) - (self.counters.step_s - step_before)) * 1e6)
        else:
            self.flush(start)
        timeout_ms = self.timeout_ms(ran=bool(batch)) if block else 0
        if timeout_ms > 0 and self.flush_backlogs():
            timeout_ms = min(timeout_ms, BACKLOG_POLL_MS)
        if timeout_ms > 0 and self.spin():
            return
        if not self.wait(timeout_ms) and timeout_ms > 0:
            self.housekeeping(time.perf_counter())
            self._events = None  # after a quiet timeout, look at every source once (a guard, off the hot path)

    def spin(self) -> bool:
        """`runtime.spin_us`: poll without sleeping until a frame arrives (True) or the spin time is over.
        A spin that got less than SPIN_CPU_SHARE of the CPU meanwhile was taking a core another process wanted
        (on a shared machine, maybe the peer that would send the frame): no spinning for SPIN_BACKOFF_S."""
        if self.spin_s <= 0:
            return False
        start = time.perf_counter()
        if start < self._spin_off_until:
            return False
        cpu = time.thread_time()
        deadline = start + self.spin_s
        arrived = False
        while time.perf_counter() < deadline:
            if self.wait(0):
                arrived = True
                break
        end = time.perf_counter()
        if time.thread_time() - cpu < SPIN_CPU_SHARE * (end - start):
            self._spin_off_until = end + SPIN_BACKOFF_S
        return arrived

    def wait(self, timeout_ms: int) -> bool:
        """Poll every source up to `timeout_ms`; what is readable is drained by the next iteration. False when
        nothing is."""
        self._events = self.poller.poll(timeout_ms)
        return bool(self._events)

    def busy(self) -> bool:
        """Whether an iteration has anything to do now (frames the last poll reported, requests ready or waiting
        for KV)."""
        return bool(self._events) or self.sched.has_work

    def timeout_ms(self, ran: bool) -> int:
        """How long the poll may wait: not at all after a step that left requests ready or waiting for KV (the
        next batch may be due now, or a finish freed the KV a waiting request needs), else until the earliest
        timer (max-wait, stats), at most IDLE_POLL_MS."""
        if ran and self.sched.has_work:
            return 0
        now = time.perf_counter()
        due = [t for t in (self.sched.wait_timeout(now), self._stats_due_in(now)) if t is not None]
        return min([IDLE_POLL_MS] + [int(t * 1000) + 1 for t in due])

    def housekeeping(self, now: float) -> None:
        if os.getppid() != self.parent:
            self.stopping = True  # the front end died without telling us
        for rid in [r for r, t in self.aborted.items() if now - t > ABORT_MEMORY_S]:
            del self.aborted[rid]


_OUTPUT_BITS: tuple[tuple[int, StepOutputName], ...] = ((OUT_LOGITS, "logits"), (OUT_HIDDEN, "hidden"))


def _row(values: Any, row: int, wanted: int) -> list[float] | None:
    """One request's row of a step output as plain floats (msgpack), if asked for and the engine has it."""
    return values[row].float().tolist() if wanted and values is not None else None


def _startup_profile(cfg: SubserverConfig, spec: ModelSpec, engine: Engine, rt: RuntimeConfig) -> dict[str, Any] | None:
    """`latency_profile: auto`: this engine's step latencies for `thresholds=auto` (measured once, cached;
    a model served alone has no thresholds to choose)."""
    if spec.latency_profile != AUTO_PROFILE or rt.thresholds != "auto" or not rt.delayed_batching or len(cfg.models) < 2:
        return None
    from tokenrouter.cache import cache_dir
    from tokenrouter.engine.profiling import profile_at_startup

    return profile_at_startup(engine, cfg.models, cfg.index, rt.auto_max_concurrency, cache_dir() / "profiles")


PF_EXITING = 0x4  # /proc/<pid>/stat flags: the process is exiting


def _gone(pid: int) -> bool:
    """Whether our parent `pid` is dead or dying. The death signal (die_with_parent) of a parent killed by SIGKILL
    can arrive while its other threads still hold its pid: getppid() alone does not tell yet, /proc does."""
    if os.getppid() != pid:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] in ("Z", "X") or bool(int(fields[6]) & PF_EXITING)


def _on_sigterm(signum: int, frame: Any) -> None:
    """Shut down once: a process group's SIGTERM is often followed by the front end's own, which must not
    raise again inside the clean-up (printed as an ignored `SystemExit: 0` traceback from a finaliser)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(0)


def main(blob: bytes) -> None:
    """Process entry point. Exit status 0 on shutdown, 1 on a fatal error."""
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the front end, which shuts us down
    signal.signal(signal.SIGTERM, _on_sigterm)
    die_with_parent()
    cfg = SubserverConfig.from_blob(blob)
    ctx = zmq.Context()
    keys = cfg.keys
    auth = None if keys is None else start_authenticator(ctx, keys)
    direct = cfg.transport == "ipc" and RuntimeConfig.from_dict(cfg.runtime).peer_link == "direct"
    to_frontend: PushLink | Link = unix_link.connect(unix_link.frontend_path(cfg.where)) if direct \
        else PushLink(connect_outbox(ctx, cfg.frontend, keys))
    status = 0
    engine: Engine | None = None
    try:
        spec = ModelSpec.from_dict(cfg.models[cfg.index])
        if spec.engine != "sim":  # a sim subserver never imports torch (seconds of start-up)
            import torch

            torch.set_num_threads(spec.threads)
        from tokenrouter.engine.factory import build_engine

        engine = build_engine(spec)
        names = [m["name"] for m in cfg.models]
        algo = build_algorithm(cfg.algorithm, cfg.index, names, cfg.algorithm_params)
        algo.bind(engine)
        profile = _startup_profile(cfg, spec, engine, RuntimeConfig.from_dict(cfg.runtime))
        inbox, endpoint = bind_inbox(ctx, cfg.transport, cfg.where, f"model{cfg.index}", keys)
        listener = Listener(unix_link.peer_path(cfg.where, cfg.index)) if direct else None
        ready = Ready(cfg.index, os.getpid(), endpoint, list(engine.eos_token_ids), engine.vocab_size, profile)
        freeze_startup()  # torch and the model out of the cyclic GC's full collections (~100 ms each)
        to_frontend.send(encode([ready]))
        Subserver(cfg, engine, algo, ctx, inbox, to_frontend, listener).run()
    except SystemExit:
        pass
    except BaseException as exc:  # report why in one line (the front end shows it to clients), then exit non-zero
        status = 1
        if isinstance(exc, UserError | EngineFailure):
            text = str(exc)
        else:  # a crash: its traceback goes to the server's log (our stderr is the front end's), never to clients
            text = f"{type(exc).__name__}: {exc}"
            print(f"subserver of model {cfg.models[cfg.index].get('name')!r} crashed:", file=sys.stderr)
            traceback.print_exc()
        to_frontend.send(encode([Fatal(cfg.index, one_line(text))]))
    finally:
        if engine is not None:  # tensor-parallel ranks are told to stop and are waited for
            with contextlib.suppress(Exception):
                engine.close()
        to_frontend.close(linger_s=2.0)  # let a final Report / Fatal reach the front end
        if auth is not None:
            auth.stop()
        ctx.destroy(linger=0)
        if cfg.transport == "ipc" and _gone(parent):  # the front end died (SIGKILL) without cleaning up
            remove_dir(Path(cfg.where))
    sys.stderr.flush()
    os._exit(status)  # everything is flushed; skip the slow interpreter teardown of torch


if __name__ == "__main__":
    main(sys.stdin.buffer.read())
