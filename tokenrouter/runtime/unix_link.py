"""Direct runtime links for `runtime.peer_link=direct` (ipc mode): AF_UNIX stream sockets, length-prefixed frames.

Why not ZeroMQ on this one path: a hand-off is on the critical path of every routed token, and a zmq ipc://
frame wakes the sender's I/O thread, the receiver's I/O thread and then the receiver, three scheduling
delays on a machine whose cores are busy with model steps. A plain socket written from the loop and polled
by the receiver costs one wake-up: `benchmarks/bench_zmq_floor.py` measures both ping-pongs side by side.
Stream sockets rather than SOCK_SEQPACKET because a frame (a first contact carrying a long prompt) may be
larger than a socket buffer. Security is that of ipc://: the socket files live in the run's private 0700
directory. With runtime.peer_link=direct every runtime link uses them (subserver <-> subserver, front end <->
subserver; each process also keeps its zmq inbox bound); the default (zmq) and tcp mode (CURVE) use ZeroMQ.

A send never blocks the event loop: what the kernel does not take is kept in order and written on the next
`flush()`; the loop polls more often while a backlog remains (`backlog`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

HEADER = struct.Struct("<I")  # frame length, little-endian
_HEADER_SIZE = HEADER.size
MAX_FRAME = 1 << 30  # a header claiming more than this is not ours: the link is closed
_READ_CHUNK = 1 << 16


def peer_path(where: str, index: int) -> str:
    """The listening socket of model `index` in the run's private directory."""
    return os.path.join(where, f"model{index}.peers")


def frontend_path(where: str) -> str:
    """The front end's listening socket (subservers' reports) in the run's private directory."""
    return os.path.join(where, "frontend.peers")


class LinkClosed(Exception):
    """The other end went away (or sent something that is not a frame)."""


class Link:
    """One connected stream socket: `send()` frames out, `recv_frames()` complete frames in."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._out = bytearray()
        self._in = bytearray()

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def backlog(self) -> bool:
        return bool(self._out)

    def send(self, frame: bytes) -> None:
        """Write `frame` now, as much as the kernel takes; the rest is kept, in order, for `flush()`."""
        data = HEADER.pack(len(frame)) + frame
        if self._out:  # a backlog goes first
            self._out += data
            self.flush()
            return
        sent = self._write(data)
        if sent < len(data):
            self._out += data[sent:]

    def flush(self) -> None:
        while self._out:
            sent = self._write(self._out)
            if not sent:
                return
            del self._out[:sent]

    def _write(self, data: bytes | bytearray) -> int:
        """One non-blocking send: the bytes the kernel took (0: its buffer is full)."""
        try:
            return self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:  # the peer is gone: what it would have received is moot
            self._out.clear()
            raise LinkClosed(str(exc)) from None

    def recv_frames(self) -> list[bytes]:
        """Every complete frame readable now; LinkClosed once the peer has closed (after its last frames)."""
        closed = False
        while True:
            try:
                data = self.sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                closed = True
                break
            if not data:
                closed = True
                break
            self._in += data
            if len(data) < _READ_CHUNK:
                break  # the kernel had no more: skip the EAGAIN read (poll is level-triggered: nothing is lost)
        frames = self._frames()
        if closed and not frames:
            raise LinkClosed("the peer closed the link")
        return frames

    def _frames(self) -> list[bytes]:
        """Cut the complete frames off the front of the input buffer (one delete for all of them)."""
        buf = self._in
        frames = []
        pos, held = 0, len(buf)
        while held - pos >= _HEADER_SIZE:
            (size,) = HEADER.unpack_from(buf, pos)
            if size > MAX_FRAME:
                buf.clear()
                raise LinkClosed(f"a frame header claims {size} bytes")
            end = pos + _HEADER_SIZE + size
            if end > held:
                break
            frames.append(bytes(buf[pos + _HEADER_SIZE:end]))
            pos = end
        if pos:
            del buf[:pos]
        return frames

    def close(self, linger_s: float = 0.0) -> None:
        """Close; with `linger_s`, first wait up to that long for a backlog to go out (a last report)."""
        if linger_s > 0 and self._out:
            with contextlib.suppress(OSError):
                self.sock.settimeout(linger_s)
                self.sock.sendall(self._out)
        with contextlib.suppress(OSError):
            self.sock.close()


class Listener:
    """The listening socket peers connect to; `accept()` returns the links that arrived since last time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def accept(self) -> list[Link]:
        links = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return links
            links.append(Link(conn))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def connect(path: str) -> Link:
    """A link to the listener at `path` (which exists: its subserver reported Ready before Peers was sent)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return Link(sock)
