"""CPU time of another process, for benchmarks that split a run's cost between the processes it spans."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; 0 elsewhere). Clock-tick resolution
    (10 ms): meant for runs of seconds. A spinning process's spin counts as its CPU."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
