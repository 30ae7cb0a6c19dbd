"""The floor under the hand-off round trip: a bare ZeroMQ PUSH/PULL ping-pong between two Python processes.

    .venv/bin/python benchmarks/bench_zmq_floor.py [--rounds 5000]

Same sockets as the runtime (ipc:// in a private directory, msgpack-sized frames, a blocking poll on the
receiving side), no engine, no scheduler, no routing. Two figures: two processes alone, and with a third
process receiving one frame per round as the front end does (it receives every committed token). The
runtime's hand-off round trip (`bench_runtime.py handoff`) is two such hops plus two subserver iterations.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import zmq

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--role", choices=["echo", "sink"], help=argparse.SUPPRESS)
    ap.add_argument("endpoints", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "echo":
        echo(args.endpoints[0], args.endpoints[1], args.endpoints[2] if len(args.endpoints) > 2 else None)
        return
    if args.role == "sink":
        sink(args.endpoints[0])
        return
    for with_sink in (False, True):
        t = ping_pong(args.rounds, with_sink)
        label = "two processes" if not with_sink else "two processes + a third receiving each round"
        print(f"{label}: round trip median {statistics.median(t):.1f} us, "
              f"p90 {statistics.quantiles(t, n=10)[-1]:.1f} us ({len(t)} rounds)")


if __name__ == "__main__":
    main()
