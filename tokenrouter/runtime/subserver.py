"""One model's subserver: its engine, scheduler and side of the routing algorithm in one process.

Why one process and one loop per model: models step at their own pace (no global lock-step), and a step
never waits on another model. Each iteration (`Subserver.iterate`) reads as its stages: (1) receive client,
peer and control frames without blocking; (2) schedule (delayed batching) and, when a batch is due, one engine
step and route(); (3) settle each request: commit and stream its token, finish it, keep it ready, or hand it
to a peer (the request goes PENDING here, its KV kept); (4) report: hand-offs and releases to peers, committed
tokens and finishes to the front end. A request back from a peer rejoins with its step input tokens[kv_len:],
an extend over exactly what this model missed. When nothing is due the loop blocks on its sources (epoll with
a timeout; `runtime.spin_us` spins first). The links, receiving, sending and waiting live in
runtime/subserver_io.py, runtime.trace's per-batch records in runtime/subserver_trace.py; this module decides
what happens to requests.

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
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

import msgspec
import zmq

from tokenrouter import handoff
from tokenrouter.algorithms import build_algorithm
from tokenrouter.api import PeerRequest, RouterRequest, RoutingAlgorithm, StepResult
from tokenrouter.children import decode_config, die_with_parent
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.base import Engine, EngineFailure, StepItem, StepOutput, StepOutputName, StepOutputs
from tokenrouter.errors import UserError
from tokenrouter.finish import banned_ids
from tokenrouter.heap import freeze_startup
from tokenrouter.runtime import unix_link
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
    Shutdown,
    StatsRequest,
    Submit,
    encode,
)
from tokenrouter.runtime.plugin_guard import (
    RouteClock,
    RouteOverBudget,
    algorithm_error,
    call_failure,
    destinations,
    handoff_loop,
    one_line,
)
from tokenrouter.runtime.scheduler import Entry, Scheduler
from tokenrouter.runtime.subserver_io import SubserverIO
from tokenrouter.runtime.subserver_trace import TracedBatch
from tokenrouter.runtime.unix_link import Link, Listener
from tokenrouter.stats import SubserverCounters
from tokenrouter.trace.record import BatchRecorder

IDLE_POLL_MS = 500  # idle wake-up period: notice a dead parent
ABORT_MEMORY_S = 60.0  # how long an aborted id is remembered (late peer frames for it are dropped)
MEDIAN_PERIOD_S = 0.2  # overhead median recomputed at most this often


class SubserverConfig(msgspec.Struct, frozen=True):
    """Everything a subserver process needs, typed: the front end encodes it once (children.spawn, msgpack on
    stdin, no pickle of our objects) and the subserver decodes it once (children.decode_config), into these
    same types; nothing below re-parses it. What the front end decided comes as facts (`startup_profile`)."""

    index: int
    models: list[ModelSpec]  # the planned set (engine/factory.py:prepare_models), entry model first
    algorithm: AlgorithmSpec  # its parameters resolved (frontend._checked_algorithm)
    runtime: RuntimeConfig
    frontend: str  # the front end's inbox endpoint
    where: str  # runtime.ipc=ipc: private dir; tcp: host to bind
    keys: CurveKeys | None = None  # tcp: the run's CURVE keys; stdin only, never logged
    startup_profile: bool = False  # measure this model's step latencies at start-up (threshold_planner.startup_profiles)

    @property
    def spec(self) -> ModelSpec:
        return self.models[self.index]


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


class StepFailed(Exception):
    """An engine step or route() raised `cause` (`algorithm`: route() did, the routing algorithm's fault)."""

    def __init__(self, cause: Exception, algorithm: bool) -> None:
        super().__init__(cause)
        self.cause = cause
        self.algorithm = algorithm


class Subserver:
    """One model's loop: receive, schedule, step and route, settle, report (`iterate`). Its links and what goes
    out on them are `io` (runtime/subserver_io.py); this class decides what happens to requests."""

    def __init__(self, cfg: SubserverConfig, engine: Engine, algo: RoutingAlgorithm, ctx: zmq.Context,
                 inbox: zmq.Socket, to_frontend: PushLink | Link, listener: Listener | None = None) -> None:
        self.index = cfg.index
        self.num_models = len(cfg.models)
        self.algorithm_name = cfg.algorithm.name
        spec, rt = cfg.spec, cfg.runtime
        self.engine = engine
        self.algo = algo
        capacity = engine.tokens_free() + engine.tokens_used()
        self.sched = Scheduler(capacity, spec.page_size, rt.max_batch_size, rt.max_step_tokens,
                               rt.max_wait_ms / 1000.0)
        self.counters = Counters(self.num_models)
        self.recorder = BatchRecorder(self.index, rt.trace_max_batches) if rt.trace else None
        self.io = SubserverIO(self.index, engine.name, ctx, inbox, to_frontend, listener, cfg.where, cfg.keys,
                              rt.spin_us / 1e6, self.handle, self.wire_stats, self.recorder)
        self.aborted: dict[str, float] = {}
        self.stopping = False
        self.parent = os.getppid()
        self.step_outputs = algo.needs.step_outputs  # what route() reads; requests may ask for more (Submit)
        self.active_n = 0  # the global active count N (last Active)
        self.clock = RouteClock(rt.route_timeout_s)
        self.max_stalled = rt.max_handoffs_per_token
        self.check_sends = handoff.overrides_send(algo)
        self._logged: set[tuple[str, str]] = set()  # (call, exception type) whose traceback went to stderr

    # ---- the loop ------------------------------------------------------------------------------------------

    def run(self) -> None:
        self.io.listen()
        while not self.stopping:
            self.iterate()

    def iterate(self, block: bool = True) -> None:
        """One pass of the loop: receive what the last poll reported, step a batch if one is due (`run_batch`:
        step, route, settle) and report what it produced (else what is queued), then wait: not at all if more
        work is due (`timeout_ms`), else (when `block`) until a frame arrives or a timer is due."""
        start = time.perf_counter()
        self.io.receive()
        batch = self.sched.next_batch(start)
        if batch:
            step_before = self.counters.step_s
            self.run_batch(batch)
            self.io.stats_dirty = True
            end = time.perf_counter()
            self.report(end)
            # the loop's own time: this iteration up to its report, less the engine step and route()
            self.counters.overhead_us.append(((end - start) - (self.counters.step_s - step_before)) * 1e6)
        else:
            self.report(start)
        if self.io.wait(self.timeout_ms(ran=bool(batch)) if block else 0):
            self.housekeeping(time.perf_counter())

    def report(self, now: float) -> None:
        """Send this iteration's news: hand-offs and releases to the peers, a Report to the front end. With the
        front end gone there is nobody left to serve."""
        if not self.io.flush(now):
            self.stopping = True

    def busy(self) -> bool:
        """Whether an iteration has anything to do now (frames the last poll reported, requests ready or waiting
        for KV)."""
        return bool(self.io.events) or self.sched.has_work

    def timeout_ms(self, ran: bool) -> int:
        """How long the poll may wait: not at all after a step that left requests ready or waiting for KV (the
        next batch may be due now, or a finish freed the KV a waiting request needs), else until the earliest
        timer (max-wait, stats), at most IDLE_POLL_MS."""
        if ran and self.sched.has_work:
            return 0
        now = time.perf_counter()
        due = [t for t in (self.sched.wait_timeout(now), self.io.stats_due_in(now)) if t is not None]
        return min([IDLE_POLL_MS] + [int(t * 1000) + 1 for t in due])

    def housekeeping(self, now: float) -> None:
        if os.getppid() != self.parent:
            self.stopping = True  # the front end died without telling us
        for rid in [r for r, t in self.aborted.items() if now - t > ABORT_MEMORY_S]:
            del self.aborted[rid]

    def wire_stats(self, now: float) -> dict[str, Any]:
        """The counters as a Report carries them, with the scheduler's occupancy."""
        return self.counters.snapshot(now, self.sched.occupancy()).to_wire()

    # ---- receive: what a message does ----------------------------------------------------------------------

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
            self.io.connect_peers(msg.endpoints)
        elif isinstance(msg, Abort):
            self.aborted[msg.rid] = now
            self.drop(msg.rid)
        elif isinstance(msg, Shutdown):
            self.stopping = True
        elif isinstance(msg, StatsRequest):
            self.counters.seq = msg.seq
            self.io.stats_requested()

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

    # ---- step, route, settle -------------------------------------------------------------------------------

    def run_batch(self, batch: list[Entry]) -> None:
        """Step `batch`, route, and settle each request (commit and stream, finish, stay ready or hand off); a
        step whose engine or route() failed fails only the requests it must (`abandon`)."""
        launched = time.perf_counter()
        traced = TracedBatch(self.recorder, self.sched, batch, launched) if self.recorder is not None else None
        reqs, items, kv_before, asked = self.step_inputs(batch, launched)
        t0 = time.perf_counter()
        try:
            out, dests = self.step(reqs, items, asked)
        except (StepFailed, RouteOverBudget) as failure:
            self.abandon(batch, items, kv_before, failure, traced, t0)
            return
        engine_s = time.perf_counter() - t0
        c = self.counters
        c.step_s += engine_s
        committed, handoffs = c.committed, c.handoffs
        c.steps += 1
        c.batch_total += len(batch)
        self.settle(batch, out, dests)
        if traced is not None:
            traced.record(items, engine_s, c.committed - committed, c.handoffs - handoffs, self.active_n)

    def step_inputs(self, batch: list[Entry], launched: float) -> tuple[list[RouterRequest], list[StepItem],
                                                                         list[int], int]:
        """Each request's step input (its KV truncated to where the input starts first), with the requests, their
        KV lengths before the step (a failed step rolls back to them) and the outputs a finishing request's
        client asked for (RequestMeta.outputs bits). Runs per request per step, on the path of every batch and
        every hand-off: one pass, no comprehension frames."""
        engine = self.engine
        reqs: list[RouterRequest] = []
        kv_before: list[int] = []
        items: list[StepItem] = []
        waited = 0.0
        asked = 0
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
        return reqs, items, kv_before, asked

    def step(self, reqs: list[RouterRequest], items: list[StepItem], asked: int) -> tuple[StepOutput, list[int]]:
        """One engine step over `items`, then route() over its result: the output and each request's destination.
        A step or route() that raised is a StepFailed, a route() past its budget a RouteOverBudget; an
        EngineFailure (the engine is gone: a TP rank died) stops the subserver, the front end fails every request."""
        try:
            out = self.engine.step(items, self.outputs_for(asked))
        except EngineFailure:
            raise
        except Exception as exc:  # a failed step fails its requests, never the server or their batch mates
            raise StepFailed(exc, algorithm=False) from exc
        try:
            dests = destinations(self.clock.call(self.algo.route, StepResult(self.index, reqs, out.next_tokens,
                                                                             out.logits, out.hidden)),
                                 len(reqs), self.num_models)
        except Exception as exc:  # a router can fail on one request's input: the others must not fail with it
            raise StepFailed(exc, algorithm=True) from exc
        return out, dests

    def settle(self, batch: list[Entry], out: StepOutput, dests: list[int]) -> None:
        """Each request after the step routed it to `dests`: its token committed and streamed (or left for the
        peer), then it finishes, stays ready for the next step, or is handed off. Runs per request per step: one
        pass, no comprehension frames, helpers only where a rule lives (handoff, finish)."""
        now = time.perf_counter()
        c = self.counters
        algo, routes, report = self.algo, c.routes, self.io.report
        chunks = report.chunks
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
                    report.outputs.append((req.rid, _row(out.logits, row, e.meta.outputs & OUT_LOGITS),
                                           _row(out.hidden, row, e.meta.outputs & OUT_HIDDEN)))
                self.finish(e, settled.finish)
            elif settled.peer is None:
                stays.append(e)
            else:
                self.hand_off(e, settled.peer)
        self.sched.make_ready(stays, now)

    def outputs_for(self, asked: int) -> StepOutputs:
        """What this step must return: what the algorithm reads, plus what the batch's clients `asked` for
        (`RequestMeta.outputs` bits: Std. Serving's dispatcher, /generate's return_logits)."""
        if not asked:
            return self.step_outputs
        return self.step_outputs | {name for bit, name in _OUTPUT_BITS if asked & bit}

    def abandon(self, batch: list[Entry], items: list[StepItem], kv_before: list[int],
                failure: StepFailed | RouteOverBudget, traced: TracedBatch | None, t0: float) -> None:
        """A step whose engine or route() failed: its time counted and its batch traced as failed, then the
        requests it must fail do. A route() past its budget fails all of them (stepping each alone would stall the
        model once per request); any other failure steps each alone (`isolate`)."""
        self.counters.step_s += time.perf_counter() - t0
        if traced is not None:
            traced.record(items, time.perf_counter() - t0, 0, 0, self.active_n, failed=True)
        if isinstance(failure, StepFailed):
            exc = failure.cause
            error = self.plugin_error("route()", exc) if failure.algorithm else f"{type(exc).__name__}: {exc}"
            self.isolate(batch, kv_before, error, failure.algorithm)
            return
        self.io.report.over_budget += 1
        error = self.algorithm_error(self.clock.overrun)
        print(f"subserver {self.engine.name!r}: {error}; {len(batch)} request(s) failed", file=sys.stderr)
        for e in batch:
            self.fail(e.req.rid, error, algorithm=True)

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

    # ---- a request's end, a hand-off, a failure ------------------------------------------------------------

    def finish(self, e: Entry, reason: str) -> None:
        self.io.report.finishes.append((e.req.rid, reason, len(e.req.output_ids), e.handoffs))
        self.drop(e.req.rid)

    def hand_off(self, e: Entry, dest: int) -> None:
        """Send `e` to model `dest`; fail it instead when the algorithm's send() raises or builds a message no
        peer can use, or when `e` went runtime.max_handoffs_per_token hand-offs without a committed token."""
        if e.stalled >= self.max_stalled:
            self.fail(e.req.rid, self.algorithm_error(handoff_loop(e.stalled)), algorithm=True)
            return
        try:
            out = handoff.hand_off(self.algo, e.req, dest)
            if self.check_sends:
                handoff.check_wire(out.msg)
        except Exception as exc:
            self.fail(e.req.rid, self.plugin_error("send()", exc), algorithm=True)
            return
        e.handoffs += 1
        e.stalled += 1
        self.counters.handoffs += 1
        self.sched.pend(e)
        self.io.outbox.setdefault(dest, []).append(PeerMessage(out.msg, self.index, e.handoffs,
                                                               e.meta if out.first else None, e.stalled))

    def drop(self, rid: str, unregistered: Entry | None = None) -> None:
        """Forget a request here and tell every peer that has seen it to do the same."""
        e = self.sched.remove(rid) or unregistered
        self.engine.release(rid)
        if e is None:
            return
        for peer in e.req.peer_seen:
            release = PeerRequest(rid, 0, [], len(e.req.prompt_ids), finished=True)
            self.io.outbox.setdefault(peer, []).append(PeerMessage(release, self.index, e.handoffs))

    def fail(self, rid: str, error: str, unregistered: Entry | None = None, algorithm: bool = False) -> None:
        """Fail one request: the request's own fault, or (`algorithm`) the routing algorithm's."""
        report = self.io.report
        (report.algorithm_failures if algorithm else report.failures).append((rid, error))
        self.drop(rid, unregistered)

    def algorithm_error(self, what: str) -> str:
        """The one line a request failed by the routing algorithm reports (the client sees it in a 500)."""
        return algorithm_error(self.algorithm_name, self.engine.name, what)

    def plugin_error(self, call: str, exc: Exception) -> str:
        """algorithm_error() for a plugin call that raised or returned what the runtime cannot use; the line goes
        to stderr too, with the traceback the first time this call fails with this exception type."""
        error = self.algorithm_error(call_failure(call, exc))
        print(f"subserver {self.engine.name!r}: {error}", file=sys.stderr)
        key = (call, type(exc).__name__)
        if key not in self._logged and not isinstance(exc, handoff.ProtocolError):
            self._logged.add(key)
            traceback.print_exception(exc, file=sys.stderr)
        return error


_OUTPUT_BITS: tuple[tuple[int, StepOutputName], ...] = ((OUT_LOGITS, "logits"), (OUT_HIDDEN, "hidden"))


def _row(values: Any, row: int, wanted: int) -> list[float] | None:
    """One request's row of a step output as plain floats (msgpack), if asked for and the engine has it."""
    return values[row].float().tolist() if wanted and values is not None else None


def _startup_profile(cfg: SubserverConfig, engine: Engine) -> dict[str, Any] | None:
    """`latency_profile: auto`: this engine's step latencies (measured once, cached) when the front end asked
    for them (`cfg.startup_profile`: it decided, threshold_planner.startup_profiles)."""
    if not cfg.startup_profile:
        return None
    from tokenrouter.cache import cache_dir
    from tokenrouter.engine.profiling import profile_at_startup

    return profile_at_startup(engine, [m.to_dict() for m in cfg.models], cfg.index, cfg.runtime.auto_max_concurrency,
                              cache_dir() / "profiles")


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
    try:
        cfg = decode_config(blob, SubserverConfig)
    except UserError as exc:  # no front end to tell yet: one line on stderr (the front end's log), exit 1
        print(f"subserver: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    ctx = zmq.Context()
    keys = cfg.keys
    auth = None if keys is None else start_authenticator(ctx, keys)
    direct = cfg.runtime.direct_links
    to_frontend: PushLink | Link = unix_link.connect(unix_link.frontend_path(cfg.where)) if direct \
        else PushLink(connect_outbox(ctx, cfg.frontend, keys))
    status = 0
    engine: Engine | None = None
    try:
        spec = cfg.spec
        if spec.engine != "sim":  # a sim subserver never imports torch (seconds of start-up)
            import torch

            torch.set_num_threads(spec.threads)
        from tokenrouter.engine.factory import build_engine

        engine = build_engine(spec)
        names = [m.name for m in cfg.models]
        algo = build_algorithm(cfg.algorithm.name, cfg.index, names, cfg.algorithm.params)
        algo.bind(engine)
        profile = _startup_profile(cfg, engine)
        inbox, endpoint = bind_inbox(ctx, cfg.runtime.ipc, cfg.where, f"model{cfg.index}", keys)
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
            print(f"subserver of model {cfg.spec.name!r} crashed:", file=sys.stderr)
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
        if cfg.runtime.ipc == "ipc" and _gone(parent):  # the front end died (SIGKILL) without cleaning up
            remove_dir(Path(cfg.where))
    sys.stderr.flush()
    os._exit(status)  # everything is flushed; skip the slow interpreter teardown of torch


if __name__ == "__main__":
    main(sys.stdin.buffer.read())
