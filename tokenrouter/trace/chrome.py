"""A run as a Chrome Trace Event document (the JSON Object Format Perfetto and chrome://tracing open).

Tracks: per model one track of complete ("X") slices, one per batch, named by kind (decode / extend / mixed)
with the batch's figures as args; a process per model for TokenRouter (a subserver each), one process with a
track per model for lock-step (one driver). Hand-offs are flow events ("s" -> "f") from the batch that sent a
request to the batch that first ran it on the peer. Requests are async slices ("b"/"e", one id each) from
arrival to finish, with a nested slice per run on one model. Timestamps are microseconds from the run's first
event; `otherData.tokenrouter` says what the document holds (models, system, cap reached).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenrouter.fsutil import atomic_write_chunks, atomic_write_text
from tokenrouter.trace.record import BatchRecord, RequestSpan, TraceLog

FORMAT = "tokenrouter-trace/1"
BATCH_CAT = "batch"
FLOW_CAT = "handoff"
REQUEST_CAT = "request"
FLOW_LEAD_US = 0.001  # a flow leaves its batch just before the batch's end (it must lie inside the slice)
WRITE_EVENTS = 4096  # write_chrome_trace: events encoded and written at a time

Run = tuple[int, float, float, int, int]  # (model, start s, end s, first batch, last batch); batch -1: unknown


def chrome_trace(log: TraceLog | None, models: list[str], system: str, requests: list[RequestSpan]) -> dict[str, Any]:
    """The document for one run: `log`'s batch records (None: the system records none: request slices only)
    and the finished `requests`."""
    meta: dict[str, Any] = {}
    events = list(trace_events(log, models, system, requests, meta))
    return _document(events, meta)


def write_chrome_trace(path: Path, log: TraceLog | None, models: list[str], system: str,
                       requests: list[RequestSpan]) -> Path:
    """chrome_trace(...) written to `path` atomically, event by event: a long run's document never exists whole in
    memory (as dicts it took ~6x what the batch records themselves hold; docs/see_a_run.md#limits)."""
    meta: dict[str, Any] = {}

    def chunks() -> Iterator[bytes]:  # _document's shape, the events written as they come
        encode = json.JSONEncoder(separators=(",", ":")).encode
        yield b'{"traceEvents":['
        pending: list[str] = []
        comma = b""
        for ev in trace_events(log, models, system, requests, meta):
            pending.append(encode(ev))
            if len(pending) >= WRITE_EVENTS:
                yield comma + ",".join(pending).encode()
                pending, comma = [], b","
        if pending:
            yield comma + ",".join(pending).encode()
        yield b'],"displayTimeUnit":"ms","otherData":' + encode({"tokenrouter": meta}).encode() + b"}"

    atomic_write_chunks(path, chunks())
    return path


def _document(events: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"tokenrouter": meta}}


def trace_events(log: TraceLog | None, models: list[str], system: str, requests: list[RequestSpan],
                 meta: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The document's events one by one; once they are all out, `meta` holds its `otherData.tokenrouter`."""
    batches = sorted(log.batches, key=lambda b: b.launch) if log is not None else []
    starts = [b.launch for b in batches] + [r.arrival for r in requests]
    origin = min(starts) if starts else 0.0

    def us(t: float) -> float:
        return round((t - origin) * 1e6, 3)

    driver = log.driver if log is not None else None
    track = _tracks(models, driver)
    yield from _metadata(models, driver)
    for b in batches:
        pid, tid = track[b.model]
        yield {"ph": "X", "cat": BATCH_CAT, "name": b.kind, "pid": pid, "tid": tid, "ts": us(b.launch),
               "dur": round((b.end - b.launch) * 1e6, 3), "args": batch_args(b, models)}
    runs = _runs_from_batches(batches)
    requests_pid = max(p for p, _ in track.values()) + 1 if track else 1
    yield _name("process_name", requests_pid, 0, "requests")
    yield _name("process_sort_index", requests_pid, 0, len(track) + 1)
    flow = 0
    for r in sorted(requests, key=lambda r: r.arrival):
        own = runs.get(r.rid) if r.rid is not None else None
        own = own or _runs_from_commits(r, models)
        rid = f"request-{r.rid if r.rid is not None else r.index}"
        common = {"cat": REQUEST_CAT, "id": rid, "pid": requests_pid, "tid": 0}
        yield {**common, "ph": "b", "name": f"request {r.index}", "ts": us(r.arrival),
               "args": {"index": r.index, "finish_reason": r.finish_reason, "runs": len(own), "handoffs": r.handoffs,
                        "tokens": sum(n for _, n, _ in r.commits)}}
        if r.first_token is not None:
            yield {**common, "ph": "n", "name": "first token", "ts": us(r.first_token)}
        for model, start, end, _, _ in own:
            start, end = max(start, r.arrival), min(max(end, start), r.finish)
            yield {**common, "ph": "b", "name": f"on {models[model]}", "ts": us(start)}
            yield {**common, "ph": "e", "name": f"on {models[model]}", "ts": us(end)}
        yield {**common, "ph": "e", "name": f"request {r.index}", "ts": us(r.finish)}
        for (_, _, _, _, sent), (_, _, _, ran, _) in zip(own, own[1:], strict=False):
            if sent < 0 or ran < 0:
                continue
            src, dst = batches[sent], batches[ran]
            flow += 1
            (spid, stid), (dpid, dtid) = track[src.model], track[dst.model]
            leave = max(us(src.launch), us(src.end) - FLOW_LEAD_US)
            yield {"ph": "s", "cat": FLOW_CAT, "name": "hand-off", "id": flow, "pid": spid, "tid": stid,
                   "ts": leave, "args": {"request": r.index}}
            yield {"ph": "f", "bp": "e", "cat": FLOW_CAT, "name": "hand-off", "id": flow, "pid": dpid,
                   "tid": dtid, "ts": us(dst.launch), "args": {"request": r.index}}
    meta.update(format=FORMAT, system=system, models=list(models), driver=driver, origin_perf_counter_s=origin,
                batches=len(batches), requests=len(requests), handoff_flows=flow)
    if log is not None:
        meta.update(trace_max_batches=log.cap, capped=log.capped())


def batch_args(b: BatchRecord, models: list[str]) -> dict[str, Any]:
    """A batch slice's args: what `summary` reads back (sums in ms) and what a reader wants on hovering."""
    return {"model": models[b.model], "batch_size": b.rows, "decode_rows": b.decode_rows,
            "new_tokens": b.input_tokens, "committed": b.committed, "handoffs": b.handoffs,
            "threshold": b.threshold, "ready": b.ready, "active_n": b.active, "forced_by_max_wait": b.forced,
            "engine_ms": round(b.engine_s * 1e3, 4), "wait_ms_sum": round(b.wait_s * 1e3, 4),
            "wait_ms_max": round(b.wait_max_s * 1e3, 4), "busy_wait_ms_sum": round(b.busy_wait_s * 1e3, 4),
            "failed": b.failed}


def records_from_chrome(doc: dict[str, Any], model: int) -> list[BatchRecord]:
    """The batch records of a one-model trace (a Std. Serving model server's), as model `model`'s; request ids
    are not kept (the server's requests are the dispatcher's per-token calls)."""
    origin = doc["otherData"]["tokenrouter"]["origin_perf_counter_s"]
    out = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X" or ev.get("cat") != BATCH_CAT:
            continue
        a, launch = ev["args"], origin + ev["ts"] / 1e6
        out.append(BatchRecord(model, launch, launch + ev["dur"] / 1e6, a["engine_ms"] / 1e3, a["batch_size"],
                               a["decode_rows"], a["new_tokens"], a["committed"], a["handoffs"], a["threshold"],
                               a["ready"], a["active_n"], a["forced_by_max_wait"], a["wait_ms_sum"] / 1e3,
                               a["wait_ms_max"] / 1e3, a["busy_wait_ms_sum"] / 1e3, [], a["failed"]))
    return out


def write_trace(path: Path, doc: dict[str, Any]) -> Path:
    """trace.json, written atomically."""
    atomic_write_text(path, json.dumps(doc, separators=(",", ":")))
    return path


def _tracks(models: list[str], driver: str | None) -> dict[int, tuple[int, int]]:
    """Model index -> (pid, tid): a process per model, or one driver process with a thread per model."""
    if driver is None:
        return {i: (i + 1, 1) for i in range(len(models))}
    return {i: (1, i + 1) for i in range(len(models))}


def _metadata(models: list[str], driver: str | None) -> list[dict[str, Any]]:
    if driver is not None:
        events = [_name("process_name", 1, 0, driver), _name("process_sort_index", 1, 0, 0)]
        for i, model in enumerate(models):
            events += [_name("thread_name", 1, i + 1, model), _name("thread_sort_index", 1, i + 1, i)]
        return events
    events = []
    for i, model in enumerate(models):
        events += [_name("process_name", i + 1, 0, f"{model} subserver"), _name("process_sort_index", i + 1, 0, i),
                   _name("thread_name", i + 1, 1, "batches")]
    return events


def _name(kind: str, pid: int, tid: int, value: object) -> dict[str, Any]:
    key = "name" if kind.endswith("_name") else "sort_index"
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {key: value}}


def _runs_from_batches(batches: list[BatchRecord]) -> dict[str, list[Run]]:
    """Per request id, its runs on one model: consecutive batches of the same model that stepped it."""
    runs: dict[str, list[Run]] = defaultdict(list)
    for k, b in enumerate(batches):
        for rid in b.rids:
            own = runs[rid]
            if own and own[-1][0] == b.model:
                model, start, _, first, _ = own[-1]
                own[-1] = (model, start, b.end, first, k)
            else:
                own.append((b.model, b.launch, b.end, k, k))
    return runs


def _runs_from_commits(r: RequestSpan, models: list[str]) -> list[Run]:
    """Without batch records: a run per model change in the request's commits, from the commit before it."""
    index = {m: i for i, m in enumerate(models)}
    runs: list[Run] = []
    last = r.arrival
    for t, _, model in r.commits:
        m = index.get(model, 0)
        if runs and runs[-1][0] == m:
            runs[-1] = (m, runs[-1][1], t, -1, -1)
        else:
            runs.append((m, last, t, -1, -1))
        last = t
    return runs
