"""The GPU tests' step schedule, importable by a child process too (`python cuda_schedule.py SPEC_JSON` builds
that engine, runs the schedule and prints its tokens as JSON; `--kill-a-rank` then kills a TP rank and prints the
next step's failure): SGLang keeps process-wide state, so every sglang engine but one runs in a process of its
own."""

from __future__ import annotations

import json
import sys

from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import StepItem
from tokenrouter.engine.factory import build_engine

PROMPTS = [[5, 17, 33], [2, 9, 40, 41, 7, 3, 88], [60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 12]]
NEW = 10


def run_schedule(engine) -> list[list[int]]:
    """All three prefill together, decode together (graph replays), r1 truncated back and re-extended."""
    outs = [[t] for t in engine.step([StepItem(str(i), p) for i, p in enumerate(PROMPTS)]).next_tokens]
    for _ in range(NEW - 1):
        res = engine.step([StepItem(str(i), [o[-1]]) for i, o in enumerate(outs)])
        for o, t in zip(outs, res.next_tokens, strict=True):
            o.append(t)
    engine.truncate("1", len(PROMPTS[1]) + 2)
    again = engine.step([StepItem("1", outs[1][2:6])]).next_tokens[0]
    for i in range(3):
        engine.release(str(i))
    return outs + [[again]]


def kill_a_rank(engine) -> str:
    """Kill rank 1 of a TP engine mid-run; the next step's failure, as text (an EngineFailure, not a hang)."""
    import os
    import signal

    from tokenrouter.engine.base import EngineFailure

    engine.step([StepItem("x", [1, 2, 3])])
    os.kill(engine.procs[0].pid, signal.SIGKILL)
    engine.procs[0].wait(30)
    try:
        engine.step([StepItem("x", [4])])
    except EngineFailure as exc:
        return f"EngineFailure: {exc}"
    return "no failure"


if __name__ == "__main__":
    engine = build_engine(ModelSpec.from_dict(json.loads(sys.argv[1])))
    try:
        print(json.dumps(run_schedule(engine)))
        if "--kill-a-rank" in sys.argv:
            print(json.dumps(kill_a_rank(engine)))
    finally:
        engine.close()
