"""A tensor-parallel worker rank (`python -m tokenrouter.engine.tp_worker`, a RankConfig as msgpack on stdin).

It loads its shard, then mirrors rank 0: every command rank 0 broadcasts (step, release, truncate) is run
here in the same order, so each collective inside the forward meets its partner. It exits 0 when told to
close, 1 with one line on stderr on any failure, and dies with its parent (PDEATHSIG): no orphan ranks.
"""

from __future__ import annotations

import os
import signal
import sys

from tokenrouter.children import decode_config, die_with_parent
from tokenrouter.engine.tp import RankConfig, apply_command, recv_command, start_rank
from tokenrouter.errors import first_line
from tokenrouter.heap import freeze_startup


def main(blob: bytes) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the front end, which shuts rank 0 down
    die_with_parent()
    try:
        cfg = decode_config(blob, RankConfig)
    except Exception as exc:
        print(f"tensor-parallel rank: {first_line(exc)}", file=sys.stderr)
        return 1
    try:
        group, engine = start_rank(cfg)
        freeze_startup()  # a full collection in one rank would stall every rank at the next collective
        while apply_command(engine, recv_command(group)):
            pass
    except Exception as exc:
        print(f"tensor-parallel rank {cfg.rank}: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    status = main(sys.stdin.buffer.read())
    sys.stderr.flush()
    os._exit(status)  # skip torch's slow teardown (and gloo's destructor, whose peer may be gone)
