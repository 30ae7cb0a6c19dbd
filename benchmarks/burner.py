"""`--burn` for the runtime benchmarks: one CPU-bound background process for a run (the hand-off goals' 'one
busy neighbour' setting), killed when the run ends however it ends."""

from __future__ import annotations

import subprocess
import sys


class Burner:
    def __init__(self, on: bool) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None

    def __enter__(self) -> Burner:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
