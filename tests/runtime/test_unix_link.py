"""Direct peer links: frames arrive whole and in order whatever the kernel's buffers cut them into (large
frames, a backlog a slow reader drains later), a closed or garbled peer is reported, never a hang."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from tokenrouter.runtime.unix_link import HEADER, Link, LinkClosed, Listener, connect


def pair(tmp_path: Path) -> tuple[Listener, Link, Link]:
    listener = Listener(str(tmp_path / "l.peers"))
    out = connect(listener.path)
    [inbound] = listener.accept()
    return listener, out, inbound


def read_all(link: Link, count: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < count:
        got += link.recv_frames()
    return got


def test_frames_arrive_whole_and_in_order_past_the_socket_buffer(tmp_path: Path) -> None:
    listener, out, inbound = pair(tmp_path)
    frames = [b"a" * 10, b"", b"b" * (8 << 20), bytes(range(256)) * 3]  # one 8 MiB frame: many kernel writes
    for f in frames:
        out.send(f)
    assert out.backlog  # the kernel took only part of the big frame: the rest waits, the send returned
    got: list[bytes] = []
    while len(got) < len(frames):
        out.flush()
        got += inbound.recv_frames()
    assert got == frames and not out.backlog
    assert listener.accept() == []
    listener.close()
    assert not Path(listener.path).exists()


def test_a_closed_peer_is_reported_after_its_last_frames(tmp_path: Path) -> None:
    _, out, inbound = pair(tmp_path)
    out.send(b"last")
    out.close()
    assert read_all(inbound, 1) == [b"last"]
    with pytest.raises(LinkClosed):
        inbound.recv_frames()
    with pytest.raises(LinkClosed):  # writing to a gone peer: reported, not an exception from the kernel
        for _ in range(100):
            inbound.send(b"x" * 65536)


def test_a_garbage_header_closes_the_link(tmp_path: Path) -> None:
    listener = Listener(str(tmp_path / "g.peers"))
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(listener.path)
    [inbound] = listener.accept()
    raw.sendall(HEADER.pack(0xFFFFFFFF) + b"junk")
    with pytest.raises(LinkClosed, match="claims"):
        read_all(inbound, 1)
    raw.close()


def test_concurrent_writer_and_reader(tmp_path: Path) -> None:
    _, out, inbound = pair(tmp_path)
    frames = [bytes([i % 251]) * (i * 997 % 70000) for i in range(300)]

    def write() -> None:
        for f in frames:
            out.send(f)
        while out.backlog:
            out.flush()

    writer = threading.Thread(target=write)
    writer.start()
    assert read_all(inbound, len(frames)) == frames
    writer.join(10)
