"""A subserver's I/O on its own (runtime/subserver_io.py), without an engine or a scheduler, over real sockets:
what it hands on from its sources and what it drops, what it sends when, and when a wait counts as quiet."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import zmq

from tokenrouter.api import PeerRequest
from tokenrouter.runtime import unix_link
from tokenrouter.runtime.ipc import bind_inbox
from tokenrouter.runtime.messages import Abort, Message, PeerMessage, Report, decode, encode
from tokenrouter.runtime.subserver_io import STATS_PERIOD_S, TRACE_SHIP_BATCHES, SubserverIO
from tokenrouter.runtime.unix_link import Link
from tokenrouter.trace.record import BatchRecorder


@contextmanager
def links(tmp_path: Path, on_message: Callable[[Message], None] = lambda msg: None,
          recorder: BatchRecorder | None = None) -> Iterator[tuple[SubserverIO, Link]]:
    """Model 0's I/O with a zmq inbox and a listener for direct peer links, and the front end's end of its
    report link."""
    ctx = zmq.Context()
    inbox, _ = bind_inbox(ctx, "ipc", str(tmp_path), "model0")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    frontend = Link(theirs)
    listener = unix_link.Listener(unix_link.peer_path(str(tmp_path), 0))
    io = SubserverIO(0, "m", ctx, inbox, Link(ours), listener, str(tmp_path), None, 0.0, on_message,
                     lambda now: {"at": now}, recorder)
    io.listen()
    try:
        yield io, frontend
    finally:
        for link in (*io.peers.values(), *io.links_in, io.to_frontend, frontend):
            link.close()
        listener.close()
        io.poller.close()
        inbox.close(linger=0)
        ctx.term()


def receive_until(io: SubserverIO, done: Callable[[], bool]) -> None:
    deadline = time.perf_counter() + 5
    while not done():
        assert time.perf_counter() < deadline
        io.poll(50)
        io.receive()


def reports(frontend: Link) -> list[Report]:
    """The Reports the front end can read now."""
    return [r for frame in frontend.recv_frames() for r in decode(frame) if isinstance(r, Report)]


def test_a_frame_or_message_that_is_not_ours_is_dropped_and_the_rest_handed_on(tmp_path, capsys) -> None:
    got: list[str] = []

    def on_message(msg: Message) -> None:
        assert isinstance(msg, Abort)
        if msg.rid == "b":
            raise TypeError("nonsense")
        got.append(msg.rid)

    with links(tmp_path, on_message) as (io, _):
        peer = unix_link.connect(unix_link.peer_path(str(tmp_path), 0))
        for frame in (encode([Abort("a")]), b"junk", encode([Abort("b"), Abort("c")])):
            peer.send(frame)
        receive_until(io, lambda: len(got) == 2)
        assert got == ["a", "c"] and len(io.links_in) == 1
        err = capsys.readouterr().err
        assert "subserver 'm': dropped a 4-byte frame" in err
        assert "subserver 'm': dropped a Abort message: TypeError: nonsense" in err
        peer.close()


def test_only_the_sources_the_poll_reported_are_read_and_a_closed_link_is_forgotten(tmp_path) -> None:
    got: list[Message] = []
    with links(tmp_path, got.append) as (io, _):
        peer = unix_link.connect(unix_link.peer_path(str(tmp_path), 0))
        receive_until(io, lambda: len(io.links_in) == 1)
        peer.send(encode([Abort("a")]))
        time.sleep(0.05)
        io.events = set()  # as if the last poll had reported nothing: the waiting frame is not looked for
        io.receive()
        assert got == []
        receive_until(io, lambda: len(got) == 1)
        peer.close()
        receive_until(io, lambda: not io.links_in)


def test_news_goes_out_once_and_counters_when_due(tmp_path) -> None:
    with links(tmp_path) as (io, frontend):
        now = time.perf_counter()
        assert io.flush(now) and reports(frontend) == []  # nothing to say: no frame
        io.report.chunks.append(("r", 0, [5]))
        io.stats_dirty, io.stats_sent = True, now
        assert io.flush(now)
        [r] = reports(frontend)
        assert r.chunks == [("r", 0, [5])] and r.stats is None  # counters not due yet
        assert io.flush(now) and reports(frontend) == []  # sent once
        later = now + STATS_PERIOD_S * 1.01  # not exactly one period: (now + P) - now can round below P
        assert io.flush(later)
        [r] = reports(frontend)
        assert r.stats == {"at": later} and not io.stats_dirty
        io.stats_requested()  # a StatsRequest is answered by the next flush
        assert io.flush(later) and reports(frontend)[0].stats == {"at": later}
        io.stats_dirty = True
        io.report.finishes.append(("r", "stop", 1, 0))  # a finish carries the counters at once
        assert io.flush(later) and reports(frontend)[0].stats == {"at": later}
        assert io.stats_due_in(later) is None
        io.stats_dirty = True
        assert io.stats_due_in(later) == pytest.approx(STATS_PERIOD_S)


def test_trace_records_ride_with_news_or_alone_once_enough_wait(tmp_path) -> None:
    recorder = BatchRecorder(0, 1000)

    def record() -> None:
        recorder.record(0.0, 0.001, 0.001, [0.0], ["r"], [1], 1, 0, 1, 1, 1, False)

    with links(tmp_path, recorder=recorder) as (io, frontend):
        record()
        assert io.flush(0.0) and reports(frontend) == []  # one record alone waits for news
        io.report.chunks.append(("r", 0, [5]))
        assert io.flush(0.0)
        assert len(reports(frontend)[0].trace) == 1
        for _ in range(TRACE_SHIP_BATCHES):
            record()
        assert io.flush(0.0) and len(reports(frontend)[0].trace) == TRACE_SHIP_BATCHES


def test_a_handoff_to_a_peer_without_a_link_yet_waits_for_it(tmp_path) -> None:
    """A peer's hand-off can overtake the front end's Peers message: the reply to it waits for the link."""
    with links(tmp_path) as (io, _):
        release = PeerMessage(PeerRequest("r", 0, [], 3, finished=True), sender=0, handoffs=1)
        io.outbox[1] = [release]
        assert io.flush(0.0) and io.outbox == {1: [release]}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        io.peers[1] = Link(ours)
        peer = Link(theirs)
        assert io.flush(0.0) and io.outbox == {}
        time.sleep(0.05)
        assert [m for frame in peer.recv_frames() for m in decode(frame)] == [release]
        peer.close()


def test_flush_says_when_the_front_end_is_gone(tmp_path) -> None:
    with links(tmp_path) as (io, frontend):
        frontend.close()
        io.report.chunks.append(("r", 0, [5]))
        assert not io.flush(0.0)
        assert io.report == Report(0)  # the news is dropped: nobody to send it to


def test_a_wait_that_runs_out_with_nothing_readable_is_quiet(tmp_path) -> None:
    """A quiet wait makes the next receive look at every source once (the guard for the edge-signalled zmq
    descriptor); a wait for a frame, or a look without waiting, is not quiet."""
    with links(tmp_path) as (io, _):
        io.receive()  # reading ZMQ_EVENTS clears the inbox descriptor's start-up signal
        assert io.wait(0) is False
        io.events = set()
        assert io.wait(20) is True and io.events is None
        peer = unix_link.connect(unix_link.peer_path(str(tmp_path), 0))
        assert io.wait(1000) is False and io.events  # the listener is readable
        peer.close()
