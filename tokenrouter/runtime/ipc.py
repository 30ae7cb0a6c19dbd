"""ZeroMQ PUSH/PULL endpoints: every process owns one PULL inbox and one PUSH per destination.

Why PUSH/PULL: one-way, fire-and-forget frames need no reply matching, keep per-sender order, and queue
while a peer is still connecting. Unlimited high-water marks mean a send never blocks an event loop (the
loop is the flow control: a subserver only sends what it produced in one step). ipc:// sockets live in a
private 0700 directory that the front end removes on exit; tcp:// endpoints bind to the configured host.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import zmq

_MAX_IPC_PATH = 100  # sockaddr_un limit is 107 bytes


def private_dir() -> Path:
    """A fresh 0700 directory for ipc:// socket files (short path: unix socket names are length-limited)."""
    base = tempfile.gettempdir()
    if len(base) > _MAX_IPC_PATH - 30:
        base = "/tmp"
    path = Path(tempfile.mkdtemp(prefix="tokenrouter-", dir=base))
    os.chmod(path, 0o700)
    return path


def remove_dir(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _tune(sock: zmq.Socket) -> zmq.Socket:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    return sock


def bind_inbox(ctx: zmq.Context, transport: str, where: str, name: str) -> tuple[zmq.Socket, str]:
    """Bind a PULL socket. transport "ipc": `where` is the private dir; "tcp": `where` is the host (random
    port). Returns the socket and the endpoint others connect to."""
    sock = _tune(ctx.socket(zmq.PULL))
    if transport == "ipc":
        endpoint = f"ipc://{Path(where) / name}"
        sock.bind(endpoint)
    elif transport == "tcp":
        port = sock.bind_to_random_port(f"tcp://{where}")
        endpoint = f"tcp://{where}:{port}"
    else:
        sock.close()
        raise ValueError(f"runtime.ipc must be 'ipc' or 'tcp', got {transport!r}")
    return sock, endpoint


def connect_outbox(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    """A PUSH socket connected to another process's inbox (frames queue until the connection is up)."""
    sock = _tune(ctx.socket(zmq.PUSH))
    sock.connect(endpoint)
    return sock
