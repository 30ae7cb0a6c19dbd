"""User-space instructions per hand-off round trip of `bench_runtime.py loop`, counted by valgrind.

    .venv/bin/python benchmarks/bench_loop_instructions.py [--tokens 200,1200]

Why: on a shared 2-core VM the loop's wall-clock and thread-time figures move +-15% between runs, so a change
worth 5% cannot be seen in them. The instruction count is deterministic: it runs the loop under
`valgrind --tool=callgrind` at two token counts and divides the difference by the extra round trips (start-up
and imports cancel out). Kernel time (send / recv / epoll) is not counted. The subserver's time-based work
(stats every 20 ms, the overhead median every 0.2 s) is switched off, since valgrind's ~50x slowdown would
inflate it 50-fold per round trip. Needs valgrind (`apt install valgrind`); about 1 minute.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

import bench_runtime

from tokenrouter.runtime import subserver


def run_loop(tokens: int) -> None:
    """Child role: the `loop` round trips, without the subserver's timers."""
    subserver.STATS_PERIOD_S = subserver.MEDIAN_PERIOD_S = 1e9
    bench_runtime._loop_cost_us(tokens)


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
    ap.add_argument("--role-tokens", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role_tokens is not None:
        run_loop(args.role_tokens)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_loop_instructions: valgrind is not installed (apt install valgrind)")
    low, high = (int(x) for x in args.tokens.split(","))
    per_round_trip = (instructions(high) - instructions(low)) / (high - low)
    print(f"loop: {per_round_trip:,.0f} user-space instructions per hand-off round trip "
          f"(valgrind, {low} vs {high} round trips)")


if __name__ == "__main__":
    main()
