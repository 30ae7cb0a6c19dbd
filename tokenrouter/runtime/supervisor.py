"""Supervision of the subserver processes: spawn, readiness, death detection, shutdown.

Why apart from the client API (frontend.py): what keeps processes and sockets alive and cleaned up is a
different job from admitting requests and reassembling their outputs, and each is easier to read without
the other. This owns the processes, the ZeroMQ context, the front end's inbox and the outboxes to every
subserver; the client API hands it frames to send and gets each subserver Report through `on_report`.
SIGTERM and interpreter exit also take the subservers and socket files along.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from tokenrouter.children import spawn
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.runtime import subserver, unix_link
from tokenrouter.runtime.ipc import (
    CurveKeys,
    PushLink,
    bind_inbox,
    connect_outbox,
    private_dir,
    remove_dir,
    start_authenticator,
)
from tokenrouter.runtime.messages import Fatal, Message, Peers, Ready, Report, Shutdown, decode, encode
from tokenrouter.runtime.unix_link import Link, LinkClosed, Listener

log = logging.getLogger(__name__)

DEATH_GRACE_S = 0.2  # after noticing a dead subserver, wait this long for its Fatal frame (the reason)
SUPERVISE_PERIOD_S = 0.1
SHUTDOWN_WAIT_S = 5.0


class RuntimeFailure(RuntimeError):
    """The serving system failed (a subserver died, start-up failed, or the front end was closed)."""


class Subservers:
    """One subserver process per model, from spawn to shutdown. `on_report` gets every Report; `on_death`
    is called once, with the reason, when a subserver dies after start-up (the client API then fails its
    requests and closes)."""

    def __init__(self, models: list[ModelSpec], algorithm: AlgorithmSpec, runtime: RuntimeConfig,
                 on_report: Callable[[Report], None], on_death: Callable[[str], Any],
                 startup_profiles: list[bool] | None = None) -> None:
        self.models = models
        # per model: measure its step latencies at start-up (decided by the front end: threshold_planner.py)
        self.startup_profiles = startup_profiles or [False] * len(models)
        self.model_names = [m.name for m in models]
        self.algorithm = algorithm
        self.runtime = runtime
        self.on_report = on_report
        self.on_death = on_death
        self.procs: list[subprocess.Popen] = []
        self.ready: list[Ready | None] = [None] * len(models)
        self.failure: str | None = None  # why the runtime stopped serving; None while healthy
        self.keys: CurveKeys | None = None  # runtime.ipc=tcp: the run's CURVE key pair
        self.inbox: zmq.Socket | None = None
        self.outboxes: list[PushLink | Link] = []  # per model: direct unix links (ipc mode) or zmq PUSH
        self.listener: Listener | None = None  # ipc mode: where the subservers' direct links arrive
        self.links_in: list[Link] = []
        self._where = ""
        self._fatal: dict[int, str] = {}
        self._dir: Path | None = None
        self._ctx: zmq.Context | None = None
        self._auth: Any = None  # the CURVE keys' ZAP handler thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._startup: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._closed = False

    @property
    def socket_dir(self) -> Path | None:
        """The private directory holding the ipc:// socket files (None with tcp or when closed)."""
        return self._dir

    def health_problem(self) -> str | None:
        """None when every subserver is up and serving, else why not. Polls the processes themselves, so a
        dead model shows the moment it is gone, before the supervisor's next round notices."""
        if self.failure is not None:
            return self.failure
        if self._closed:
            return "the front end is closed"
        if self._startup is None or not self._startup.done():
            return "starting"
        for name, p in zip(self.model_names, self.procs, strict=True):
            if p.poll() is not None:
                return f"subserver {name!r} (pid {p.pid}) exited with code {p.returncode}"
        return None

    # ---- start-up ------------------------------------------------------------------------------------------

    async def start(self) -> list[Ready]:
        """Spawn one subserver per model and wait until every one has built its engine (their Ready, in model
        order). On failure or timeout the caller closes."""
        rt = self.runtime
        where = rt.host
        if rt.ipc == "ipc":
            self._dir = private_dir()
            where = str(self._dir)
        self._ctx = zmq.Context()
        if rt.ipc == "tcp":
            self.keys = CurveKeys.generate()
            self._auth = start_authenticator(self._ctx, self.keys)
        self.inbox, endpoint = bind_inbox(self._ctx, rt.ipc, where, "frontend", self.keys)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.inbox.getsockopt(zmq.FD), self.drain)
        self._where = where
        if rt.direct_links:
            self.listener = Listener(unix_link.frontend_path(where))
            self._loop.add_reader(self.listener.fileno(), self._accept)
        _watch(self)
        self._startup = self._loop.create_future()
        for i in range(len(self.models)):
            cfg = subserver.SubserverConfig(i, self.models, self.algorithm, rt, endpoint, where, self.keys,
                                            self.startup_profiles[i])
            self.procs.append(spawn("tokenrouter.runtime.subserver", cfg))
        self._task = asyncio.create_task(self._supervise())
        try:
            await asyncio.wait_for(asyncio.shield(self._startup), rt.startup_timeout_s)
        except TimeoutError:
            missing = [self.model_names[i] for i, r in enumerate(self.ready) if r is None]
            raise RuntimeFailure(f"subserver(s) {missing} not ready after {rt.startup_timeout_s:g} s "
                                 "(runtime.startup_timeout_s)") from None
        return [r for r in self.ready if r is not None]

    def connect(self) -> None:
        """Open an outbox to every ready subserver and tell each where its peers are."""
        assert self._ctx is not None
        endpoints = [r.endpoint for r in self.ready if r is not None]
        if self.listener is not None:
            self.outboxes = [unix_link.connect(unix_link.peer_path(self._where, i)) for i in range(len(endpoints))]
        else:
            self.outboxes = [PushLink(connect_outbox(self._ctx, e, self.keys)) for e in endpoints]
        self.send_all([Peers(endpoints)])

    # ---- frames --------------------------------------------------------------------------------------------

    def send_all(self, msgs: list[Message]) -> None:
        frame = encode(msgs)
        for i in range(len(self.outboxes)):
            self.send(i, frame)

    def send(self, model: int, frame: bytes) -> None:
        """One frame to one subserver. A direct link the kernel did not take all of is finished from the event
        loop when its socket turns writable (never a blocking write on the loop)."""
        link = self.outboxes[model]
        link.send(frame)
        if link.backlog and isinstance(link, Link) and self._loop is not None:
            self._loop.add_writer(link.fileno(), self._write_backlog, link)

    def _write_backlog(self, link: Link) -> None:
        try:
            link.flush()
        except LinkClosed:
            pass  # the subserver is gone; _supervise reports it
        if not link.backlog and self._loop is not None:
            self._loop.remove_writer(link.fileno())

    def drain(self) -> None:
        """Drain every queued frame (the zmq FD is edge-triggered: read until empty on each wake-up)."""
        sock = self.inbox
        while sock is not None and sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self._on_frame(sock.recv(zmq.NOBLOCK))

    def _accept(self) -> None:
        assert self.listener is not None and self._loop is not None
        for link in self.listener.accept():
            self.links_in.append(link)
            self._loop.add_reader(link.fileno(), self._read_link, link)

    def _read_link(self, link: Link) -> None:
        try:
            frames = link.recv_frames()
        except LinkClosed:  # a subserver exited; _supervise reports it
            self._drop_link(link)
            return
        for frame in frames:
            self._on_frame(frame)

    def _drop_link(self, link: Link) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(link.fileno())
        self.links_in.remove(link)
        link.close()

    def _on_frame(self, frame: bytes) -> None:
        try:
            msgs = decode(frame)
        except ValueError as exc:  # not from a subserver of ours: drop it, never die of it
            log.warning("front end: dropped a %d-byte frame: %s", len(frame), exc)
            return
        for msg in msgs:
            if isinstance(msg, Report):
                self.on_report(msg)
            elif isinstance(msg, Ready):
                self._on_ready(msg)
            elif isinstance(msg, Fatal):
                self._on_fatal(msg)

    def _on_ready(self, msg: Ready) -> None:
        self.ready[msg.model] = msg
        if all(r is not None for r in self.ready) and self._startup and not self._startup.done():
            self._startup.set_result(None)

    def _on_fatal(self, msg: Fatal) -> None:
        name = self.model_names[msg.model]
        self._fatal[msg.model] = msg.error
        if self._startup and not self._startup.done():
            self._startup.set_exception(RuntimeFailure(f"model {name!r} failed to start: {msg.error}"))

    # ---- death detection -----------------------------------------------------------------------------------

    async def _supervise(self) -> None:
        while not self._closed:
            await asyncio.sleep(SUPERVISE_PERIOD_S)
            self.drain()  # cheap guard against a missed edge on the zmq FD
            dead = [i for i, p in enumerate(self.procs) if p.poll() is not None]
            if not dead or self._closed:
                continue
            await asyncio.sleep(DEATH_GRACE_S)  # let the dying process's Fatal frame arrive
            i = dead[0]
            p = self.procs[i]
            name = self.model_names[i]
            reason = self._fatal.get(i) or f"exited unexpectedly with code {p.returncode}"
            self.failure = f"subserver {name!r} (pid {p.pid}) died: {reason}"
            if self._startup and not self._startup.done():
                self._startup.set_exception(RuntimeFailure(f"model {name!r} failed to start: {reason}"))
                return
            await self.on_death(self.failure)
            return

    # ---- shutdown ------------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Shut every subserver down and remove the socket directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.outboxes:  # connected: ask politely first
            with contextlib.suppress(zmq.ZMQError, LinkClosed):
                self.send_all([Shutdown()])
            deadline = time.monotonic() + SHUTDOWN_WAIT_S
            while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        self.kill_now()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def kill_now(self) -> None:
        """Synchronous last resort (also atexit and SIGTERM): no subserver and no socket file survives."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(2.0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        loop = self._loop if self._loop is not None and not self._loop.is_closed() else None
        if self.inbox is not None and loop is not None:
            loop.remove_reader(self.inbox.getsockopt(zmq.FD))
        if loop is not None:  # unregister before closing: a closed socket has no fd left to name
            for link in self.links_in:
                loop.remove_reader(link.fileno())
            for link in self.outboxes:
                if isinstance(link, Link):
                    loop.remove_writer(link.fileno())
            if self.listener is not None:
                loop.remove_reader(self.listener.fileno())
        for link in [*self.links_in, *self.outboxes]:
            link.close()
        if self.listener is not None:
            self.listener.close()
        if self.inbox is not None:
            self.inbox.close(linger=0)
        self.outboxes, self.links_in, self.inbox, self.listener = [], [], None, None
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._ctx is not None:
            self._ctx.term()
        self._ctx = None
        remove_dir(self._dir)
        self._dir = None
        _unwatch(self)


# Subserver sets alive in this process. SIGTERM's default action and interpreter exit would skip close(), so
# both kill their subservers and socket dirs first. An application with its own SIGTERM handler (uvicorn)
# keeps it and calls close() itself, e.g. after draining in-flight requests.
_LIVE: set[Subservers] = set()


def _kill_all() -> None:
    for group in list(_LIVE):
        group.kill_now()


def _on_sigterm(signum: int, frame: Any) -> None:
    _kill_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # die by the signal, as if we had not been here


def _watch(group: Subservers) -> None:
    if not _LIVE:
        atexit.register(_kill_all)
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    _LIVE.add(group)


def _unwatch(group: Subservers) -> None:
    _LIVE.discard(group)
    if not _LIVE:
        atexit.unregister(_kill_all)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

