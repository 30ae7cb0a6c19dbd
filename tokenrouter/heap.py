"""Keep the cyclic GC's full collections off the serving path.

Why: a process that imported torch and built a model holds ~170k tracked objects, and a full collection walks
them all: 83-105 ms measured mid-serving (`benchmarks/bench_runtime.py gc`), a stall in a loop whose steps
take milliseconds. Frozen (`gc.freeze()`, moved to a generation the collector never scans) the same
collections take <= 8 ms. Collected first, so start-up's garbage is not kept forever.
"""

from __future__ import annotations

import gc


def freeze_startup() -> None:
    """Call once start-up is done (engine built, server up): what exists now is never collected again."""
    gc.collect()
    gc.freeze()
