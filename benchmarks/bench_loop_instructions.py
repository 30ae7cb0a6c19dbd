"""User-space instructions per hand-off round trip of `bench_runtime.py loop`, counted by valgrind.

    .venv/bin/python benchmarks/bench_loop_instructions.py [--tokens 200,1200]
    .venv/bin/python benchmarks/bench_loop_instructions.py --by-function [--top 30]

Why: on a shared 2-core VM the loop's wall-clock and thread-time figures move +-15% between runs, so a change
worth 5% cannot be seen in them. The instruction count is deterministic: it runs the loop under
`valgrind --tool=callgrind` at two token counts and divides the difference by the extra round trips (start-up
and imports cancel out). Kernel time (send / recv / epoll) is not counted. The subserver's time-based work
(stats every 20 ms, the overhead median every 0.2 s) is switched off, since valgrind's ~50x slowdown would
inflate it 50-fold per round trip. Needs valgrind (`apt install valgrind`); about 1 minute.

`--by-function`: where they go, as Python bytecodes executed per round trip in each function (an opcode trace
in this process, differenced the same way; seconds, no valgrind). A bytecode is ~75 instructions on average
here, so the total says how much of the count is interpreted code and the rows say which functions to read.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import Counter
from types import FrameType
from typing import Any

import bench_runtime

from tokenrouter.runtime import subserver, subserver_io


def run_loop(tokens: int) -> None:
    """Child role: the `loop` round trips, without the subserver's timers."""
    subserver_io.STATS_PERIOD_S = subserver.MEDIAN_PERIOD_S = 1e9
    bench_runtime._loop_cost_us(tokens)


def bytecodes(tokens: int) -> Counter[str]:
    """Bytecodes executed per function (file:name) over `run_loop(tokens)`, by an opcode trace."""
    counts: Counter[str] = Counter()

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"] += 1
        return trace

    sys.settrace(trace)
    try:
        run_loop(tokens)
    finally:
        sys.settrace(None)
    return counts


def by_function(low: int, high: int, top: int) -> None:
    base, more = bytecodes(low), bytecodes(high)
    per = {name: (more[name] - base[name]) / (high - low) for name in more}
    print(f"loop: {sum(per.values()):,.0f} bytecodes per hand-off round trip ({low} vs {high} round trips)")
    for name, count in sorted(per.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{count:8.1f}  {name}")


def instructions(tokens: int) -> int:
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                          __file__, "--role-tokens", str(tokens)], capture_output=True, text=True, check=True)
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {out.stderr[-500:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="200,1200", help="the two token counts (round trips) to difference")
    ap.add_argument("--by-function", action="store_true", help="bytecodes per function instead (no valgrind)")
    ap.add_argument("--top", type=int, default=30, help="--by-function: rows to print")
    ap.add_argument("--role-tokens", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role_tokens is not None:
        run_loop(args.role_tokens)
        return
    low, high = (int(x) for x in args.tokens.split(","))
    if args.by_function:
        by_function(low, high, args.top)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_loop_instructions: valgrind is not installed (apt install valgrind)")
    per_round_trip = (instructions(high) - instructions(low)) / (high - low)
    print(f"loop: {per_round_trip:,.0f} user-space instructions per hand-off round trip "
          f"(valgrind, {low} vs {high} round trips)")


if __name__ == "__main__":
    main()
