"""How much CPU the official R2R server's processes take while it serves nothing (its worker loops poll).

Why: on a 2-core machine, a server whose idle loops hold the cores leaves less for the forward passes of the
requests it does serve; this measures it, beside the same figure for TokenRouter's subservers (which block in
zmq polls when idle; runtime.spin_us of spinning at most). Needs R2R's environment (`make official-venv`).
Usage: python benchmarks/official_r2r_idle.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group `pgid` (from /proc)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 (pgrp), counted after the command name
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def descendants_cpu_s(root: int) -> float:
    """User + system CPU seconds of `root`'s live descendants (TokenRouter's subservers are its children)."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = (int(fields[11]) + int(fields[12])) / TICK
    total, stack = 0.0, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack += children.get(pid, [])
    return total


async def idle_share(system: object, cpu: callable, seconds: float) -> float:
    await system.start()
    try:
        await asyncio.sleep(2.0)  # start-up work settles
        before, start = cpu(), time.perf_counter()
        await asyncio.sleep(seconds)
        return (cpu() - before) / (time.perf_counter() - start)
    finally:
        await system.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    from tokenrouter.cli.hydra_config import compose
    from tokenrouter.evals.systems import build_system

    router = next((Path.home() / ".cache/tokenrouter/routers").glob("tiny-*/r2r/router.json"), None)
    if router is None:
        raise SystemExit("no R2R router for the local pair in the cache: run `tokenrouter demo` first")
    print(f"load average {open('/proc/loadavg').read().split()[0]} ({os.cpu_count()} cores)")
    for name in ("official_r2r", "tokenrouter"):
        cfg = compose(["+experiment=official_cpu", f"system={name}", f"++models.routers.r2r={router}"])
        system = build_system(cfg)
        if name == "official_r2r":
            share = asyncio.run(idle_share(system, lambda s=system: group_cpu_s(s._proc.pid), args.seconds))
        else:
            share = asyncio.run(idle_share(system, lambda: descendants_cpu_s(os.getpid()), args.seconds))
        print(f"{name}: {share:.2f} cores busy while idle ({args.seconds:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
