"""The Trace Event Format's required fields (the JSON Object Format, as Perfetto and chrome://tracing read it),
checked event by event: what a trace processor would reject or misdraw. Used where Perfetto's own trace
processor cannot run (the `perfetto` package downloads its binary from the internet on first use)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

NUMBER = (int, float)


def check_trace_events(doc: dict[str, Any]) -> list[str]:
    """Problems with `doc` as a Trace Event document (empty: none)."""
    problems: list[str] = []
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents array"]
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append("displayTimeUnit must be ms or ns")
    open_async: dict[tuple, list[str]] = defaultdict(list)
    flows: dict[Any, list[str]] = defaultdict(list)
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for k, ev in enumerate(events):
        where = f"event {k} ({ev.get('ph')!r} {ev.get('name')!r})"
        ph = ev.get("ph")
        if not isinstance(ph, str) or not isinstance(ev.get("name"), str):
            problems.append(f"{where}: needs string ph and name")
            continue
        if not isinstance(ev.get("pid"), int) or not isinstance(ev.get("tid"), int):
            problems.append(f"{where}: needs integer pid and tid")
        if ph == "M":
            if ev["name"] not in ("process_name", "thread_name", "process_sort_index", "thread_sort_index") \
                    or not isinstance(ev.get("args"), dict):
                problems.append(f"{where}: unknown metadata or no args")
            continue
        if not isinstance(ev.get("ts"), NUMBER) or ev["ts"] < 0:
            problems.append(f"{where}: needs a timestamp ts >= 0 (microseconds)")
            continue
        if ph == "X":
            if not isinstance(ev.get("dur"), NUMBER) or ev["dur"] < 0:
                problems.append(f"{where}: a complete event needs dur >= 0")
            else:
                slices[(ev["pid"], ev["tid"])].append((ev["ts"], ev["ts"] + ev["dur"]))
        elif ph in ("b", "e", "n"):
            if "id" not in ev or not isinstance(ev.get("cat"), str):
                problems.append(f"{where}: an async event needs cat and id")
                continue
            key = (ev["cat"], ev["id"])
            if ph == "b":
                open_async[key].append(ev["name"])
            elif ph == "e":
                if not open_async[key] or open_async[key][-1] != ev["name"]:
                    problems.append(f"{where}: ends an async slice that is not the innermost open one")
                else:
                    open_async[key].pop()
        elif ph in ("s", "t", "f"):
            if "id" not in ev or not isinstance(ev.get("cat"), str):
                problems.append(f"{where}: a flow event needs cat and id")
                continue
            flows[(ev["cat"], ev["id"])].append(ph)
            if ph == "f" and ev.get("bp") not in (None, "e"):
                problems.append(f"{where}: bp must be 'e'")
        elif ph not in ("i", "I", "C", "B", "E"):
            problems.append(f"{where}: unknown phase")
    problems += [f"async slice {key} left open: {names}" for key, names in open_async.items() if names]
    problems += [f"flow {key} is {phases}, not s ... f" for key, phases in flows.items()
                 if phases[0] != "s" or phases[-1] != "f"]
    for track, spans in slices.items():  # slices on one track must nest or follow, never overlap partly
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:], strict=False):
            if b0 < a1 and b1 > a1 + 1e-3:
                problems.append(f"track {track}: slices [{a0}, {a1}] and [{b0}, {b1}] overlap")
                break
    return problems
