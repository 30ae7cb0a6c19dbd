"""ZeroMQ PUSH/PULL endpoints: every process owns one PULL inbox and one PUSH per destination.

Why PUSH/PULL: one-way, fire-and-forget frames need no reply matching, keep per-sender order, and queue
while a peer is still connecting. Unlimited high-water marks mean a send never blocks an event loop (the
loop is the flow control: a subserver only sends what it produced in one step). ipc:// sockets live in a
private 0700 directory that the front end removes on exit (and that the next start removes if its owner was
killed); tcp:// endpoints bind to the configured host and are authenticated and encrypted with CURVE: one
key pair per run, handed to the subservers on their stdin, and a ZAP handler in every process that admits
only clients presenting that key, so no other process, local or remote, can connect or inject a frame.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

from tokenrouter.errors import UserError

_MAX_IPC_PATH = 100  # sockaddr_un limit is 107 bytes


OWNER_FILE = "owner"  # "<pid> <start time>" of the process that made the directory


def private_dir() -> Path:
    """A fresh 0700 directory for ipc:// socket files (short path: unix socket names are length-limited).
    Directories left behind by killed owners (SIGKILL skips every clean-up) are removed first."""
    base = tempfile.gettempdir()
    if len(base) > _MAX_IPC_PATH - 30:
        base = "/tmp"
    remove_stale_dirs(Path(base))
    path = Path(tempfile.mkdtemp(prefix="tokenrouter-", dir=base))
    os.chmod(path, 0o700)
    (path / OWNER_FILE).write_text(_process_id(os.getpid()) or str(os.getpid()))
    return path


def remove_dir(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _process_id(pid: int) -> str | None:
    """pid plus its start time (/proc), so a recycled pid is not taken for the owner; None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else f"{pid} {fields[19]}"


def remove_stale_dirs(base: Path) -> list[Path]:
    """Remove this user's tokenrouter-* socket directories whose owner process is gone; returns them.
    Directories without an owner file (being made right now, or by another tool) are left alone."""
    removed = []
    for path in base.glob("tokenrouter-*"):
        try:
            if path.stat().st_uid != os.getuid() or not path.is_dir():
                continue
            owner = (path / OWNER_FILE).read_text().split()
        except OSError:
            continue
        if not owner or not owner[0].isdigit():
            continue
        alive = _process_id(int(owner[0]))
        if alive is None or (len(owner) > 1 and alive != " ".join(owner[:2])):
            remove_dir(path)
            removed.append(path)
    return removed


@dataclass(frozen=True)
class CurveKeys:
    """The run's CURVE key pair (Z85 text): every tcp inbox serves with it and every client presents it."""

    public: str
    secret: str

    @classmethod
    def generate(cls) -> CurveKeys:
        if not zmq.has("curve"):
            raise UserError("runtime.ipc=tcp needs libzmq built with CURVE (libsodium) to authenticate its links")
        public, secret = zmq.curve_keypair()
        return cls(public.decode(), secret.decode())


class _RunKeyOnly:
    """ZAP credentials: admit a CURVE client only if it presents the run's own public key."""

    def __init__(self, public: str) -> None:
        self.public = public.encode()

    def callback(self, domain: str, z85_key: bytes) -> bool:
        return z85_key == self.public


def start_authenticator(ctx: zmq.Context, keys: CurveKeys) -> ThreadAuthenticator:
    """The ZAP handler for every CURVE server socket of `ctx` (stop() it before terminating the context)."""
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback("*", credentials_provider=_RunKeyOnly(keys.public))
    return auth


def _tune(sock: zmq.Socket) -> zmq.Socket:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    return sock


def bind_inbox(ctx: zmq.Context, transport: str, where: str, name: str,
               keys: CurveKeys | None = None) -> tuple[zmq.Socket, str]:
    """Bind a PULL socket. transport "ipc": `where` is the private dir; "tcp": `where` is the host (random
    port), and `keys` make it a CURVE server. Returns the socket and the endpoint others connect to."""
    sock = _tune(ctx.socket(zmq.PULL))
    if transport == "ipc":
        endpoint = f"ipc://{Path(where) / name}"
        sock.bind(endpoint)
    elif transport == "tcp":
        if keys is None:
            sock.close()
            raise ValueError("a tcp inbox needs the run's CURVE keys")
        sock.curve_server = True
        sock.curve_secretkey = keys.secret.encode()
        sock.curve_publickey = keys.public.encode()
        port = sock.bind_to_random_port(f"tcp://{where}")
        endpoint = f"tcp://{where}:{port}"
    else:
        sock.close()
        raise ValueError(f"runtime.ipc must be 'ipc' or 'tcp', got {transport!r}")
    return sock, endpoint


def connect_outbox(ctx: zmq.Context, endpoint: str, keys: CurveKeys | None = None) -> zmq.Socket:
    """A PUSH socket connected to another process's inbox (frames queue until the connection is up); a tcp
    endpoint is reached as a CURVE client with the run's keys."""
    sock = _tune(ctx.socket(zmq.PUSH))
    if endpoint.startswith("tcp://"):
        if keys is None:
            sock.close()
            raise ValueError("a tcp outbox needs the run's CURVE keys")
        sock.curve_publickey = keys.public.encode()
        sock.curve_secretkey = keys.secret.encode()
        sock.curve_serverkey = keys.public.encode()
    sock.connect(endpoint)
    return sock


class PushLink:
    """A PUSH socket behind the same send / flush / backlog interface as a direct unix link, so the subserver
    sends to a peer without caring which transport reaches it (zmq queues internally: never a backlog)."""

    backlog = False

    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock

    def send(self, frame: bytes) -> None:
        self.sock.send(frame, zmq.NOBLOCK)

    def flush(self) -> None:
        pass

    def close(self, linger_s: float = 0.0) -> None:
        self.sock.close(linger=int(linger_s * 1000))
