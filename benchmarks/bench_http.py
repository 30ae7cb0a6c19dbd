"""What the HTTP front end costs per token: `tokenrouter serve` on sim models driven by many aiohttp clients.

    .venv/bin/python benchmarks/bench_http.py [--concurrency 16 128 256] [--tokens 200] [--event-loops auto,asyncio] [--http httptools,h11]

Why: `vllm bench serve`, SGLang's `bench_serving` and lm-eval drive this server; at high concurrency the
front end (one asyncio process: the runtime's front end, FastAPI / uvicorn, SSE framing) is on the path of
every token, and on a GPU host it can cap throughput before the models do. One sim model (`stay`, 6 ms steps)
so the step rate is known: for each concurrency, streamed and whole answers (`/v1/completions`), the token
rate at the clients against the sim's ceiling (concurrency / 6 ms; `sim-r2r`'s second model stays idle), and
CPU per token of the server process, its subservers (the sim's step spins its last 1 ms: not a runtime cost)
and this client process. Every request's completion_tokens (streamed: from the usage chunk) is checked. aiohttp, as
the serving benchmarks use: httpx's connection pool scans every connection per request (quadratic in them),
which made the client, not the server, the bottleneck at 128 connections. `--event-loops auto,asyncio` x `--http
httptools,h11` starts one server per `$TOKENROUTER_EVENT_LOOP` setting (tokenrouter/event_loop.py) and HTTP parser
(`server.http`) and drives them in turn, each concurrency and mode on every server back to back, so a shared
machine's drift hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from proc_stat import cpu_seconds
from serve_process import start_server

from tokenrouter import event_loop

try:
    import aiohttp
except ImportError:
    sys.exit("bench_http: aiohttp is not installed (pip install -e '.[dev]')")

STEP_MS = 6.0
SERVE = ["models=sim-r2r", "algorithm=stay", "server.port=0", "runtime.max_batch_size=1024"]


async def _drive(url: str, concurrency: int, tokens: int, stream: bool, server: int, children: list[int]) -> str:
    async with aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(i: int, n: int) -> int:
            body = {"model": "sim-r2r", "prompt": [1, 2, 3, i], "max_tokens": n, "stream": stream,
                    "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True} if stream else None}
            async with session.post("/v1/completions", json=body) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"bench_http: HTTP {resp.status}: {await resp.text()}")
                if not stream:
                    return (await resp.json())["usage"]["completion_tokens"]
                last = b""
                async for line in resp.content:  # the usage chunk is the last before [DONE]
                    if line.startswith(b"data: {"):
                        last = line
                event = json.loads(last[len(b"data: "):])
                if "error" in event or not event.get("usage"):
                    raise RuntimeError(f"bench_http: the stream ended with {last[:200]!r}")
                return event["usage"]["completion_tokens"]

        await asyncio.gather(*(one(i, 10) for i in range(concurrency)))  # warm-up: connections open
        before = [cpu_seconds(server), sum(map(cpu_seconds, children)), time.process_time()]
        t0 = time.perf_counter()
        got = await asyncio.gather(*(one(i, tokens) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
        after = [cpu_seconds(server), sum(map(cpu_seconds, children)), time.process_time()]
    total = concurrency * tokens
    if sum(got) != total:
        raise RuntimeError(f"bench_http: {sum(got)} tokens came back, {total} asked for")
    server, sub, client = ((b - a) * 1e6 / total for a, b in zip(before, after, strict=True))
    return (f"concurrency {concurrency:>3} {'streamed' if stream else 'whole   '}: {total / elapsed:8,.0f} tok/s "
            f"({total / elapsed / (concurrency * 1000 / STEP_MS):.0%} of the sim's ceiling); CPU per token: server "
            f"{server:.1f} us, subservers {sub:.1f}, client {client:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 128, 256])
    ap.add_argument("--tokens", type=int, default=200, help="tokens per request")
    ap.add_argument("--event-loops", default=os.environ.get(event_loop.ENV, "auto"),
                    help="comma-separated $TOKENROUTER_EVENT_LOOP settings, one server each, driven in turn")
    ap.add_argument("--http", default="httptools", help="comma-separated server.http parsers, one server each")
    args = ap.parse_args()
    servers: dict[str, tuple[subprocess.Popen, str, list[int]]] = {}
    try:
        for loop in args.event_loops.split(","):
            for parser in args.http.split(","):
                proc, url = start_server([*SERVE, f"server.http={parser}"], "bench_http", {event_loop.ENV: loop})
                children = [int(pid) for pid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
                servers[f"{event_loop.ENV}={loop} server.http={parser}"] = (proc, url, children)
        print(f"== HTTP front end: tokenrouter serve, one sim model ({STEP_MS:g} ms steps, `stay`), aiohttp clients ==")
        for concurrency in args.concurrency:
            for stream in (True, False):
                for name, (proc, url, children) in servers.items():
                    line = asyncio.run(_drive(url, concurrency, args.tokens, stream, proc.pid, children))
                    print(f"{name}: {line}" if len(servers) > 1 else line, flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (server, subserver and clients share them)")
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
