"""FdPoller: plain descriptors and a zmq socket's ZMQ_FD, with epoll and with poll (the non-Linux path)."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import pytest
import zmq

from tokenrouter.runtime.fd_poll import FdPoller


@pytest.fixture(params=["epoll", "poll"])
def poller(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FdPoller]:
    if request.param == "poll":
        monkeypatch.delattr(select, "epoll", raising=False)
    elif not hasattr(select, "epoll"):
        pytest.skip("no epoll on this platform")
    p = FdPoller()
    yield p
    p.close()


def test_plain_descriptors(poller: FdPoller) -> None:
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    poller.register(b.fileno())
    poller.register(d.fileno())
    assert poller.poll(0) == set()
    a.send(b"x")
    assert poller.poll(1000) == {b.fileno()}
    assert poller.poll(0) == {b.fileno()}  # level-triggered: still unread
    b.recv(1)
    poller.unregister(d.fileno())
    c.send(b"y")
    assert poller.poll(50) == set()  # unregistered
    a.close()
    assert poller.poll(1000) == {b.fileno()}  # a hang-up is reported: the next read says so
    for s in (b, c, d):
        s.close()


def test_zmq_socket_through_its_fd(poller: FdPoller, tmp_path) -> None:
    """The subserver's pattern: the FD says 'look', ZMQ_EVENTS says what is there; after a drain that read
    EVENTS until no POLLIN, a new frame signals the FD again (nothing waits unseen)."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{tmp_path}/in")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"ipc://{tmp_path}/in")
    fd = pull.getsockopt(zmq.FD)
    poller.register(fd)

    def drain() -> list[bytes]:
        got = []
        while pull.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            got.append(pull.recv(zmq.NOBLOCK))
        return got

    drain()  # whatever the connection signalled
    for round_ in range(3):
        push.send(b"a%d" % round_)
        push.send(b"b%d" % round_)
        got: list[bytes] = []
        for _ in range(100):
            if fd in poller.poll(1000):
                got += drain()
            if len(got) == 2:
                break
        assert got == [b"a%d" % round_, b"b%d" % round_]
        assert fd not in poller.poll(0) or drain() == []  # the signal was consumed (or is spurious)
    push.close(linger=0)
    pull.close(linger=0)
    ctx.term()
