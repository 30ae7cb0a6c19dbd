"""Schema fuzzing of the HTTP server (`make fuzz`): schemathesis against the server's own `/openapi.json`.

Starts `tokenrouter serve models=tiny-random algorithm=bernoulli server.port=0` (plus any extra overrides),
waits for its ready line, runs schemathesis with the check `not_a_server_error` (every phase: explicit
examples, boundary coverage, random fuzzing; valid and invalid bodies) under a fixed seed, then checks that
`/health` is still ok, SIGINTs the server and waits for a clean exit. Prints one JSON summary line
(examples, 5xx count, duration) and exits 1 on any 5xx, failed check, unhealthy server or unclean exit.

The members' KV pools are kept small (`kv_tokens`, below) so that a generated `max_tokens` near the
schema's bound of 2**31-1 is rejected at once (400, can never fit) and no single example generates for
minutes; schemathesis still reaches every code path of a generation.

    .venv/bin/python benchmarks/fuzz_http.py [--max-examples 25] [--seed 13] [extra serve overrides ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from serve_process import ROOT, start_server

SERVE = ["models=tiny-random", "algorithm=bernoulli", "server.port=0",
         "+models.members.0.kv_tokens=1024", "+models.members.1.kv_tokens=1024"]


def schemathesis_cli() -> str:
    found = Path(sys.executable).with_name("schemathesis")
    return str(found) if found.exists() else (shutil.which("schemathesis") or
                                              sys.exit("fuzz: schemathesis is not installed (pip install -e '.[dev]')"))


def fuzz(url: str, max_examples: int, seed: int, report: Path) -> int:
    """schemathesis's exit status; the cases it ran are recorded as NDJSON events in `report`."""
    cmd = [schemathesis_cli(), "run", f"{url}/openapi.json", "--checks", "not_a_server_error",
           "--max-examples", str(max_examples), "--seed", str(seed), "--workers", "1", "--request-timeout", "60",
           "--suppress-health-check", "too_slow", "--no-color", "--report", "ndjson",
           "--report-ndjson-path", str(report)]
    return subprocess.call(cmd, cwd=ROOT, env={**os.environ, "NO_COLOR": "1"})


def statuses(report: Path) -> list[int]:
    """The status of every response schemathesis recorded."""
    out: list[int] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            response = node.get("response")
            if isinstance(response, dict) and isinstance(response.get("status_code"), int):
                out.append(response["status_code"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for line in report.read_text().splitlines():
        if line.strip():
            walk(json.loads(line))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-examples", type=int, default=25, help="per API operation and phase (default 25)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("overrides", nargs="*", help="extra `tokenrouter serve` overrides")
    args = ap.parse_args()
    t0 = time.monotonic()
    proc, url = start_server([*SERVE, *args.overrides], "fuzz")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "events.ndjson"
            t_fuzz = time.monotonic()
            rc = fuzz(url, args.max_examples, args.seed, report)
            fuzz_s = time.monotonic() - t_fuzz
            codes = statuses(report) if report.exists() else []
        healthy = httpx.get(f"{url}/health", timeout=10).json().get("status") == "ok"
    finally:
        proc.send_signal(signal.SIGINT)
        exit_code = proc.wait(60)
    server_errors = sum(c >= 500 for c in codes)
    summary = {"examples": len(codes), "server_errors_5xx": server_errors,
               "statuses": {str(c): codes.count(c) for c in sorted(set(codes))}, "schemathesis_rc": rc,
               "health_ok_after": healthy, "server_exit": exit_code, "fuzz_s": round(fuzz_s, 1),
               "total_s": round(time.monotonic() - t0, 1)}
    print(json.dumps(summary), flush=True)
    return 0 if rc == 0 and server_errors == 0 and codes and healthy and exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
