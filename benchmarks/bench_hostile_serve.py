"""One bad client or plugin hurts only itself: innocent clients of `tokenrouter serve` alone, then the same
clients beside hostile traffic, side by side.

    .venv/bin/python benchmarks/bench_hostile_serve.py [--clients 4] [--seconds 20] [--tokens 16] [--hostile ...]

The server: the tiny random models (a tokenizer, so text prompts work) routed by the test-only algorithm
tests/runtime/user_algorithms/misbehaving.py, which routes as bernoulli except for requests whose seed names one of
its bugs. Phase `alone`: `--clients` closed-loop innocent clients (/v1/completions, `--tokens` tokens each) for
`--seconds`. Phase `hostile`: the same clients, and beside them, each in a loop with a short pause:
  - disconnecting clients: a 2,000-token request abandoned after 0.2 s (the server must abort it);
  - hostile bodies: malformed JSON, a Content-Length of 2 MiB (over server.max_body_bytes) with no body, nesting
    past the recursion limit, a lone surrogate, wrong types;
  - ~1 MB text prompts (990,000 characters, longer than the 4,096-token context), four loops at once;
  - requests that trigger the plugin's bugs: route() raising, a float / out-of-range / extra destination,
    keeps_token() / send() / receive() raising, a malformed and a foreign hand-off message, an endless hand-off
    loop (route() sleeping past its budget fails its whole batch by design and a BaseException kills the
    subserver: the tests cover those, this load leaves them out).
Printed: the innocents' p50 / p99 latency in both phases (goal: p99 within 1.5x) and whether every innocent request
succeeded, the hostile answers by status, CPU seconds of the front end, the subservers and this client process per
phase (on a 2-core machine the hostile clients' own CPU is part of what the innocents compete with), the front
end's RSS before and after, whether any error body held a traceback or an absolute path, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from proc_stat import cpu_seconds
from serve_process import start_server

try:
    import aiohttp
except ImportError:
    sys.exit("bench_hostile_serve: aiohttp is not installed (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from user_algorithms import misbehaving as bad  # noqa: E402  (the test-only plugin, as the server imports it)

SERVE = ["models=tiny-random", "algorithm.name=user_algorithms.misbehaving", "algorithm.route_prob=0.3",
         "runtime.thresholds=[1,1]", "server.port=0"]
FAULT_SEEDS = [*bad.SEEDS.values(), bad.LOOP]
KINDS = ["leave", "body", "big", "plugin"]  # disconnecting clients, hostile bodies, ~1 MB prompts, plugin bugs
PATH = re.compile(r"(?<![\w.])/(?:[\w.-]+/)+")  # an absolute file path
BIG_PROMPT = json.dumps({"prompt": "the quick brown fox jumps over the lazy dog. " * 22_000}).encode()
BODIES = [b'{"prompt": "unterminated', b"[" * 100_000, b'{"prompt": "\\ud800", "max_tokens": 2}',
          b'{"prompt": [1, 2], "max_tokens": "2"}', b'{"prompt": [1, 2], "temperature": NaN}', b"\xff\xfe"]


def rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS")) / 1024


class Tally:
    """What came back: innocent latencies and failures, hostile answers by kind and status, leaky bodies."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.innocent_failures: list[str] = []
        self.hostile: Counter[str] = Counter()
        self.leaks: list[str] = []

    def body(self, text: str) -> None:
        """An error body (a 200's text is the model's, random characters that may look like a path)."""
        if "Traceback" in text or PATH.search(text):
            self.leaks.append(text[:300])


async def innocent(session: aiohttp.ClientSession, client: int, tokens: int, until: float, tally: Tally) -> None:
    k = 0
    while time.monotonic() < until:
        k += 1
        body = {"prompt": f"Client {client} asks question {k}.", "max_tokens": tokens, "ignore_eos": True,
                "seed": 1000 + client * 100_000 + k}
        t0 = time.perf_counter()
        async with session.post("/v1/completions", json=body) as resp:
            text = await resp.text()
        tally.latencies.append(time.perf_counter() - t0)
        if resp.status != 200 or json.loads(text)["usage"]["completion_tokens"] != tokens:
            tally.body(text)
            tally.innocent_failures.append(f"{resp.status}: {text[:200]}")


async def loop(until: float, pause: float, one) -> None:
    while time.monotonic() < until:
        await one()
        await asyncio.sleep(pause)


async def hostile(session: aiohttp.ClientSession, url: str, until: float, tally: Tally, kinds: set[str]) -> None:
    host, port = url.removeprefix("http://").split(":")
    fault = iter(range(10**9))

    async def answer(kind: str, resp: aiohttp.ClientResponse) -> None:
        text = await resp.text()
        tally.hostile[f"{kind} {resp.status}"] += 1
        tally.body(text)

    async def leave() -> None:
        try:
            async with session.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2000},
                                    timeout=aiohttp.ClientTimeout(total=0.2)) as resp:
                await resp.read()
        except TimeoutError:
            tally.hostile["disconnect"] += 1

    async def bad_body() -> None:
        for raw in BODIES:
            async with session.post("/v1/completions", data=raw, headers={"content-type": "application/json"}) as r:
                await answer("body", r)
        reader, writer = await asyncio.open_connection(host, int(port))  # declares 2 MiB, sends nothing
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2097152\r\n\r\n")
        await writer.drain()
        head = (await reader.read(65536)).decode(errors="replace")
        tally.hostile[f"body {head.split(' ', 2)[1] if ' ' in head else 'closed'}"] += 1
        tally.body(head)
        writer.close()

    async def big_prompt() -> None:
        async with session.post("/v1/completions", data=BIG_PROMPT, headers={"content-type": "application/json"}) as r:
            await answer("1MB", r)

    async def plugin_bug() -> None:
        seed = FAULT_SEEDS[next(fault) % len(FAULT_SEEDS)]
        async with session.post("/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 8, "seed": seed}) as r:
            await answer("plugin", r)

    loops = {"leave": [(0.1, leave)], "body": [(0.1, bad_body)], "big": [(0.25, big_prompt)] * 4,
             "plugin": [(0.05, plugin_bug)]}
    await asyncio.gather(*(loop(until, pause, one) for kind in kinds for pause, one in loops[kind]))


async def phase(url: str, clients: int, tokens: int, seconds: float, kinds: set[str]) -> Tally:
    tally = Tally()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(url, timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(innocent(session, c, tokens, time.monotonic() + 1, Tally()) for c in range(clients)))
        until = time.monotonic() + seconds
        work = [innocent(session, c, tokens, until, tally) for c in range(clients)]
        if kinds:
            work.append(hostile(session, url, until, tally, kinds))
        await asyncio.gather(*work)
    return tally


def quantiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=100, method="inclusive")
    return statistics.median(xs), q[98]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--hostile", nargs="+", choices=KINDS, default=KINDS, help="the kinds of hostile traffic")
    args = ap.parse_args()
    pythonpath = os.pathsep.join(p for p in (str(ROOT / "tests" / "runtime"), os.environ.get("PYTHONPATH")) if p)
    proc, url = start_server(SERVE, "bench_hostile_serve", {"PYTHONPATH": pythonpath})
    try:
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs; "
              f"{args.clients} innocent clients x {args.tokens} tokens, {args.seconds:g} s per phase")
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]

        def cpu() -> list[float]:
            return [cpu_seconds(proc.pid), sum(map(cpu_seconds, children)), time.process_time()]

        rss = {"start": rss_mib(proc.pid)}
        c0 = cpu()
        alone = asyncio.run(phase(url, args.clients, args.tokens, args.seconds, set()))
        rss["after alone"], c1 = rss_mib(proc.pid), cpu()
        mixed = asyncio.run(phase(url, args.clients, args.tokens, args.seconds, set(args.hostile)))
        rss["after hostile"], c2 = rss_mib(proc.pid), cpu()
        time.sleep(2)
        rss["2 s later"] = rss_mib(proc.pid)
        a50, a99 = quantiles(alone.latencies)
        m50, m99 = quantiles(mixed.latencies)
        print(f"{'phase':<8} {'requests':>8} {'failed':>6} {'p50 ms':>8} {'p99 ms':>8}   CPU s: front end, subservers, "
              "client")
        for name, t, p50, p99, (before, after) in (("alone", alone, a50, a99, (c0, c1)),
                                                   ("hostile", mixed, m50, m99, (c1, c2))):
            spent = ", ".join(f"{b - a:.1f}" for a, b in zip(before, after, strict=True))
            print(f"{name:<8} {len(t.latencies):>8} {len(t.innocent_failures):>6} {p50 * 1e3:>8.1f} {p99 * 1e3:>8.1f}"
                  f"   {spent}")
        print(f"p99 hostile / alone: {m99 / a99:.2f}x (goal <= 1.5x); p50: {m50 / a50:.2f}x")
        print("hostile answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(mixed.hostile.items())))
        print("front end RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()))
        leaks = alone.leaks + mixed.leaks
        print(f"bodies with a traceback or an absolute path: {len(leaks)}" + (f"; first: {leaks[0]!r}" if leaks else ""))
        for failure in (alone.innocent_failures + mixed.innocent_failures)[:5]:
            print(f"innocent failure: {failure}")
        alive = proc.poll() is None
        print(f"server still up: {alive}; load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"({time.strftime('%H:%M:%S')})")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
