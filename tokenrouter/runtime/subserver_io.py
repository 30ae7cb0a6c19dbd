"""A subserver's links: receiving and decoding frames, waiting for them (poll, spin), and sending its news.

Why apart from the step loop (runtime/subserver.py): how frames get in and out, and when, is one concern
(sources, descriptors, backlogs, the stats and trace cadence of Reports), what they do to requests another;
each reads and tests on its own. The loop calls this module three times an iteration: `receive()` what the
last poll reported, `flush()` what the step produced (the step writes it into `outbox` and `report`), `wait()`
for more.

Sources are the front end's zmq inbox (polled through its ZMQ_FD: runtime/fd_poll.py), and, in ipc mode with
runtime.peer_link=direct, a listener whose accepted links carry the peers' frames (runtime/unix_link.py); a
receive reads only the sources the last poll named. Peers are reached over a direct link or a zmq PUSH
(runtime/ipc.py), both behind `send` / `flush` / `backlog`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

import zmq

from tokenrouter.runtime import unix_link
from tokenrouter.runtime.fd_poll import FdPoller
from tokenrouter.runtime.ipc import CurveKeys, PushLink, connect_outbox
from tokenrouter.runtime.messages import Message, Report, decode, encode
from tokenrouter.runtime.unix_link import Link, LinkClosed, Listener
from tokenrouter.trace.record import BatchRecorder

BACKLOG_POLL_MS = 1  # a direct link the kernel did not take everything for is retried this often
STATS_PERIOD_S = 0.02  # counters ride to the front end at most this often (finishes always carry them)
SPIN_CPU_SHARE = 0.8  # runtime.spin_us: a spin that ran less than this share of its wall time was contended
SPIN_BACKOFF_S = 0.02  # ... and spinning pauses this long
TRACE_SHIP_BATCHES = 64  # runtime.trace: records ride with the next Report, or alone once this many wait


class SubserverIO:
    """One subserver's sources, peers and outgoing news. Messages received go to `on_message`; `snapshot(now)`
    gives the counters as a Report carries them; `recorder` holds runtime.trace's batch records (None: off)."""

    def __init__(self, index: int, name: str, ctx: zmq.Context, inbox: zmq.Socket, to_frontend: PushLink | Link,
                 listener: Listener | None, where: str, keys: CurveKeys | None, spin_s: float,
                 on_message: Callable[[Message], None], snapshot: Callable[[float], dict[str, Any]],
                 recorder: BatchRecorder | None) -> None:
        self.index = index
        self.name = name
        self.ctx = ctx
        self.inbox = inbox
        self.inbox_fd: int = inbox.getsockopt(zmq.FD)  # signals a state change: receive reads ZMQ_EVENTS
        self.to_frontend = to_frontend
        self.listener = listener  # direct peer links (ipc mode); None: peers reach us through the zmq inbox
        self.links_in: list[Link] = []
        self.peers: dict[int, PushLink | Link] = {}
        self.where = where
        self.keys = keys
        self.poller = FdPoller()
        self.events: Collection[int] | None = None  # descriptors the last poll reported (None: look at every source)
        self.spin_s = spin_s
        self.spin_off_until = 0.0  # perf_counter time before which spin() does not spin (contention)
        self.on_message = on_message
        self.snapshot = snapshot
        self.recorder = recorder
        # what the step produced, sent by flush(): hand-offs and releases per peer, news for the front end
        self.outbox: dict[int, list[Message]] = {}
        self.report = Report(index)
        self.stats_dirty = False  # the counters changed since they were last sent (the loop sets it after a step)
        self.stats_sent = 0.0

    # ---- receive -------------------------------------------------------------------------------------------

    def listen(self) -> None:
        """Register the inbox and the listener with the poller (before the first `receive()`)."""
        self.poller.register(self.inbox_fd)
        if self.listener is not None:
            self.poller.register(self.listener.fileno())

    def receive(self) -> None:
        """The frames waiting on the sources the last poll reported (`events`): the front end's zmq inbox, the
        listener, the peers' direct links; every source when None. Reading only what poll reported saves a
        syscall and an EAGAIN per idle source per iteration, on the path of every hand-off."""
        events = self.events
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
        """Each message of `frame` to `on_message`; a frame or message that is not ours is dropped, with a line
        saying so, never fatal."""
        try:
            msgs = decode(frame)
        except ValueError as exc:
            print(f"subserver {self.name!r}: dropped a {len(frame)}-byte frame: {exc}", file=sys.stderr)
            return
        for msg in msgs:
            try:
                self.on_message(msg)
            except Exception as exc:  # well-formed but nonsensical (wrong field types): the same
                print(f"subserver {self.name!r}: dropped a {type(msg).__name__} message: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr)

    def connect_peers(self, endpoints: list[str]) -> None:
        """Links to every other model (the front end's Peers message): a direct unix link to the peer's
        listener in ipc mode (unless runtime.peer_link=zmq), else a zmq PUSH to its inbox (tcp: CURVE)."""
        for i, endpoint in enumerate(endpoints):
            if i == self.index or i in self.peers:
                continue
            if self.listener is not None:
                self.peers[i] = unix_link.connect(unix_link.peer_path(self.where, i))
            else:
                self.peers[i] = PushLink(connect_outbox(self.ctx, endpoint, self.keys))

    # ---- send ----------------------------------------------------------------------------------------------

    def flush(self, now: float) -> bool:
        """Send this iteration's news: `outbox` to the peers first, then `report` to the front end if it holds
        anything, with the counters when due (`stats_dirty`: at most every STATS_PERIOD_S, with every finish or
        failure, at once after a StatsRequest) and the trace records waiting. False once the front end is gone
        (nobody left to serve)."""
        if self.outbox:
            self.flush_peers()
        r = self.report
        failed = r.failures or r.algorithm_failures
        if self.stats_dirty and (r.finishes or failed or now - self.stats_sent >= STATS_PERIOD_S):
            r.stats = self.snapshot(now)
            self.stats_dirty = False
            self.stats_sent = now
        recorder = self.recorder
        if recorder is not None and recorder.pending and (r.chunks or r.finishes or failed or r.stats
                                                          or len(recorder.pending) >= TRACE_SHIP_BATCHES):
            r.trace = recorder.take()
        if r.chunks or r.finishes or failed or r.stats or r.trace or r.over_budget:
            self.report = Report(self.index)
            try:
                self.to_frontend.send(encode([r]))
            except LinkClosed:
                return False
        return True

    def flush_peers(self) -> None:
        """Hand-offs and releases first: they are on the critical path of the requests' next tokens."""
        waiting: dict[int, list[Message]] = {}
        for peer, msgs in self.outbox.items():
            link = self.peers.get(peer)
            if link is None:  # a peer's hand-off can overtake the front end's Peers message (another
                waiting[peer] = msgs  # connection): answer it once Peers is here, which wakes this loop
                continue
            try:
                link.send(encode(msgs))
            except LinkClosed:  # the peer is gone; the front end sees it die and fails its requests
                pass
        self.outbox = waiting

    def stats_requested(self) -> None:
        """A StatsRequest: the counters go out with this iteration's flush."""
        self.stats_dirty = True
        self.stats_sent = float("-inf")

    def stats_due_in(self, now: float) -> float | None:
        """Seconds until changed counters are due at the front end (None: none changed)."""
        return max(0.0, self.stats_sent + STATS_PERIOD_S - now) if self.stats_dirty else None

    def flush_backlogs(self) -> bool:
        """Write what the kernel did not take last time to each direct link; True while some remains."""
        pending = False
        for link in (*self.peers.values(), self.to_frontend):
            if link.backlog:
                with contextlib.suppress(LinkClosed):
                    link.flush()
                pending = pending or link.backlog
        return pending

    # ---- wait ----------------------------------------------------------------------------------------------

    def wait(self, timeout_ms: int) -> bool:
        """Wait up to `timeout_ms` for a frame (0: only look), sooner while a direct link holds a backlog,
        spinning first with runtime.spin_us; what is readable is received by the next `receive()`. True when a
        wait ran out with nothing readable: the next receive then looks at every source once (a guard for the
        edge-signalled zmq descriptor, off the hot path)."""
        if timeout_ms > 0 and self.flush_backlogs():
            timeout_ms = min(timeout_ms, BACKLOG_POLL_MS)
        if timeout_ms > 0 and self.spin():
            return False
        if self.poll(timeout_ms) or timeout_ms <= 0:
            return False
        self.events = None
        return True

    def spin(self) -> bool:
        """`runtime.spin_us`: poll without sleeping until a frame arrives (True) or the spin time is over.
        A spin that got less than SPIN_CPU_SHARE of the CPU meanwhile was taking a core another process wanted
        (on a shared machine, maybe the peer that would send the frame): no spinning for SPIN_BACKOFF_S."""
        if self.spin_s <= 0:
            return False
        start = time.perf_counter()
        if start < self.spin_off_until:
            return False
        cpu = time.thread_time()
        deadline = start + self.spin_s
        arrived = False
        while time.perf_counter() < deadline:
            if self.poll(0):
                arrived = True
                break
        end = time.perf_counter()
        if time.thread_time() - cpu < SPIN_CPU_SHARE * (end - start):
            self.spin_off_until = end + SPIN_BACKOFF_S
        return arrived

    def poll(self, timeout_ms: int) -> bool:
        """One poll of every source, up to `timeout_ms`: whether any is readable (`events` says which)."""
        self.events = self.poller.poll(timeout_ms)
        return bool(self.events)
