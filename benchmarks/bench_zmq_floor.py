"""The floor under the hand-off round trip: a bare ZeroMQ PUSH/PULL ping-pong between two Python processes,
next to the same ping-pong over the runtime's direct peer links (tokenrouter/runtime/unix_link.py), waiting
in a blocking poll and, with `--spin-us`, spinning first as `runtime.spin_us` makes a subserver do.

    .venv/bin/python benchmarks/bench_zmq_floor.py [--rounds 5000] [--spin-us 0,200] [--burn]

Same sockets as the runtime (ipc:// in a private directory, msgpack-sized frames, a blocking poll on the
receiving side), no engine, no scheduler, no routing. Two figures: two processes alone, and with a third
process receiving one frame per round as the front end does (it receives every committed token). The
runtime's hand-off round trip (`bench_runtime.py handoff`) is two such hops plus two subserver iterations
(their CPU cost alone: `bench_runtime.py loop`), so this round trip plus `loop` predicts `handoff`.
`--burn` runs one CPU-bound background process meanwhile (the issue's busy-neighbour setting). Last, what a
syscall costs right after a sleep against hot: code that runs after each engine step runs cold.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import idle_state
import zmq
from burner import Burner

from tokenrouter.runtime import unix_link
from tokenrouter.runtime.fd_poll import FdPoller
from tokenrouter.runtime.ipc import bind_inbox, connect_outbox, private_dir, remove_dir

FRAME = b"x" * 64  # about one PeerMessage


def echo(inbox: str, outbox: str, sink: str | None) -> None:
    """Child role: send every frame straight back (and a copy to `sink`), until an empty frame."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(inbox)
    push = connect_outbox(ctx, outbox)
    copy = connect_outbox(ctx, sink) if sink else None
    while True:
        frame = pull.recv()
        if frame:
            push.send(frame)  # the reply first, like a subserver's hand-off before its report
        if copy is not None:
            copy.send(frame)
        if not frame:
            break
    ctx.destroy(linger=1000)


def wait_readable(poller: FdPoller, spin_s: float, timeout_ms: int) -> bool:
    """Poll without sleeping for up to `spin_s`, then block up to `timeout_ms` (the subserver's wait)."""
    if spin_s > 0:
        deadline = time.perf_counter() + spin_s
        while time.perf_counter() < deadline:
            if poller.poll(0):
                return True
    return bool(poller.poll(timeout_ms))


def link_echo(path: str, spin_s: float) -> None:
    """Child role over a direct link: send every frame straight back, until an empty frame."""
    link = unix_link.connect(path)
    poller = FdPoller()
    poller.register(link.fileno())
    while True:
        wait_readable(poller, spin_s, -1)
        frames = link.recv_frames()
        for frame in frames:
            if not frame:
                link.close()
                return
            link.send(frame)


def link_ping_pong(rounds: int, spin_us: float) -> list[float]:
    """Round-trip times (us) over a direct unix link, polled like the subserver polls it (FdPoller, spinning
    first for `spin_us` on both sides)."""
    where = private_dir()
    listener = unix_link.Listener(unix_link.peer_path(str(where), 0))
    child = subprocess.Popen([sys.executable, __file__, "--role", "link", listener.path, str(spin_us)])
    poller = FdPoller()
    try:
        poller.register(listener.fileno())
        if not poller.poll(10_000):
            raise RuntimeError("the echo process did not connect within 10 s")
        [link] = listener.accept()
        poller.unregister(listener.fileno())
        poller.register(link.fileno())
        times = []
        for i in range(rounds + 500):
            t0 = time.perf_counter()
            link.send(FRAME)
            got: list[bytes] = []
            while not got:
                if not wait_readable(poller, spin_us / 1e6, 10_000):
                    raise RuntimeError("the echo process did not answer within 10 s")
                got = link.recv_frames()
            if i >= 500:
                times.append((time.perf_counter() - t0) * 1e6)
        link.send(b"")
        child.wait(timeout=10)
        return times
    finally:
        if child.poll() is None:
            child.kill()
        poller.close()
        listener.close()
        remove_dir(where)


def sink(where: str) -> None:
    """Third-process role: receive and drop frames (as the front end takes reports), until an empty frame."""
    ctx = zmq.Context()
    pull, _ = bind_inbox(ctx, "ipc", where, "sink")
    while pull.recv():
        pass
    ctx.destroy(linger=0)


def ping_pong(rounds: int, with_sink: bool) -> list[float]:
    """Round-trip times (us) of `rounds` frames, after a warm-up."""
    where = private_dir()
    ctx = zmq.Context()
    children = []
    try:
        inbox, back = bind_inbox(ctx, "ipc", str(where), "back")
        out = ctx.socket(zmq.PUSH)
        out.bind(f"ipc://{where}/out")
        args = [sys.executable, __file__, "--role", "echo", f"ipc://{where}/out", back]
        if with_sink:
            children.append(subprocess.Popen([sys.executable, __file__, "--role", "sink", str(where)]))
            args.append(f"ipc://{where}/sink")
        children.append(subprocess.Popen(args))
        poller = zmq.Poller()
        poller.register(inbox, zmq.POLLIN)
        times = []
        for i in range(rounds + 500):  # the first 500: warm-up (connections, the sink starting)
            t0 = time.perf_counter()
            out.send(FRAME)
            if not poller.poll(10_000):
                raise RuntimeError("the echo process did not answer within 10 s")
            inbox.recv()
            if i >= 500:
                times.append((time.perf_counter() - t0) * 1e6)
        out.send(b"")
        for child in children:
            child.wait(timeout=10)
        return times
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        ctx.destroy(linger=0)
        remove_dir(where)


def cold_calls(rounds: int, sleep_s: float = 0.005) -> tuple[float, float, float]:
    """Median us of a trivial syscall (getppid), then a 64-byte send on a socket pair, right after a `sleep_s`
    sleep, and of the same send made again at once: what any code pays on its first steps after the CPU idled
    (a subserver after each engine step it waited for). No receiver is waiting: no wake-up is in these."""
    a, b = socket.socketpair()
    b.setblocking(False)
    first_call, first_send, hot_send = [], [], []
    try:
        for _ in range(rounds):
            time.sleep(sleep_s)
            t0 = time.perf_counter()
            os.getppid()
            t1 = time.perf_counter()
            a.send(FRAME)
            t2 = time.perf_counter()
            a.send(FRAME)
            t3 = time.perf_counter()
            b.recv(1 << 16)
            first_call.append(t1 - t0)
            first_send.append(t2 - t1)
            hot_send.append(t3 - t2)
    finally:
        a.close()
        b.close()
    return tuple(statistics.median(x) * 1e6 for x in (first_call, first_send, hot_send))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--spin-us", default="0,200",
                    help="comma-separated spin times (us) for the direct-link ping-pong, each a row")
    ap.add_argument("--burn", action="store_true", help="run one CPU-bound background process meanwhile")
    ap.add_argument("--role", choices=["echo", "sink", "link"], help=argparse.SUPPRESS)
    ap.add_argument("endpoints", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "echo":
        echo(args.endpoints[0], args.endpoints[1], args.endpoints[2] if len(args.endpoints) > 2 else None)
        return
    if args.role == "sink":
        sink(args.endpoints[0])
        return
    if args.role == "link":
        link_echo(args.endpoints[0], float(args.endpoints[1]) / 1e6)
        return
    spins = [float(x) for x in args.spin_us.split(",")]
    runs = [("zmq, two processes", lambda: ping_pong(args.rounds, False)),
            ("zmq, two processes + a third receiving each round", lambda: ping_pong(args.rounds, True))]
    runs += [(f"direct unix link, two processes, spin {spin:g} us",
              lambda spin=spin: link_ping_pong(args.rounds, spin)) for spin in spins]
    medians = {}
    with Burner(args.burn):
        for label, run in runs:
            t = run()
            medians[label] = statistics.median(t)
            print(f"{label}: round trip median {medians[label]:.1f} us, "
                  f"p90 {statistics.quantiles(t, n=10)[-1]:.1f} us ({len(t)} rounds)")
        call, send, hot = cold_calls(min(args.rounds, 500))
        print(f"after a 5 ms sleep: getppid {call:.1f} us, then a send {send:.1f} us; the same send again at "
              f"once {hot:.1f} us (the first steps after the CPU idled run cold)")
    direct = medians[runs[2][0]]
    print(f"zmq / direct (spin {spins[0]:g}) ratio {medians['zmq, two processes'] / direct:.2f}x "
          f"({'with' if args.burn else 'no'} background process; load average {os.getloadavg()[0]:.1f})")
    print(idle_state.describe())


if __name__ == "__main__":
    main()
