"""The trace's logic on records made by hand: how waits are split, the Chrome document (tracks, flows, nested
request slices, the Trace Event format's required fields), reading a server's trace back, and the summary's
figures, each checked against values worked out by hand."""

from __future__ import annotations

import tracemalloc

import pytest

from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationResult
from tokenrouter.trace.chrome import (
    WRITE_EVENTS,
    chrome_trace,
    records_from_chrome,
    write_chrome_trace,
    write_trace,
)
from tokenrouter.trace.record import BatchRecorder, RequestSpan, TraceLog
from tokenrouter.trace.summary import format_summary, load_trace, summarize

from .trace_format import check_trace_events


def test_a_wait_is_split_into_the_models_busy_steps_and_the_rest() -> None:
    rec = BatchRecorder(0, cap=10)
    rec.record(1.0, 2.0, 0.9, [1.0], ["a"], [5], 1, 0, 1, 1, 1, False)
    rec.record(2.0, 3.0, 0.9, [2.0], ["a"], [1], 1, 0, 1, 1, 1, False)
    # b was ready at 1.5 (during both steps: 0.5 + 1.0 busy), launched at 3.5 after 0.5 idle
    rec.record(3.5, 4.0, 0.4, [1.5, 3.0], ["b", "a"], [1, 1], 2, 1, 2, 2, 2, True)
    third = rec.take()[2]
    assert third.wait_s == pytest.approx(2.0 + 0.5) and third.wait_max_s == pytest.approx(2.0)
    assert third.busy_wait_s == pytest.approx(1.5)  # b: 0.5 of step 1 + all of step 2; a: none
    assert (third.kind, third.rows, third.forced, third.handoffs) == ("decode", 2, True, 1)
    assert rec.pending == []


def test_recording_stops_at_the_cap_and_the_log_says_which_model_reached_it() -> None:
    rec = BatchRecorder(1, cap=2)
    for k in range(5):
        rec.record(k, k + 0.5, 0.5, [k], [f"r{k}"], [1], 1, 0, 1, 1, 1, False)
    records = rec.take()
    assert len(records) == 2 and rec.full
    log = TraceLog(["small", "large"], cap=2, system="tokenrouter")
    log.add(records)
    assert log.capped() == ["large"]


def test_the_window_drops_what_started_before_it() -> None:
    log = TraceLog(["m"], cap=10, system="lockstep")
    rec = BatchRecorder(0, cap=10)
    rec.record(1.0, 1.5, 0.5, [1.0], ["a"], [3], 1, 0, 0, 1, 1, False)
    log.add(rec.take())
    log.finished(_result(0, 0.9, 1.6, [(1.5, 1, "m")]), "a")
    log.start_window(2.0)
    assert log.batches == [] and log.requests == []
    rec.record(1.8, 2.5, 0.5, [1.8], ["b"], [1], 1, 0, 0, 1, 1, False)  # launched before the window: late news
    rec.record(2.5, 3.0, 0.5, [2.5], ["b"], [1], 1, 0, 0, 1, 1, False)
    log.add(rec.take())
    assert [b.launch for b in log.batches] == [2.5]


def _result(index: int, arrival: float, finish: float, commits: list[tuple[float, int, str]],
            handoffs: int = 0) -> GenerationResult:
    return GenerationResult(index=index, prompt_ids=[1], output_ids=[7] * sum(n for _, n, _ in commits),
                            finish_reason="length", arrival_s=arrival, first_token_s=commits[0][0],
                            finish_s=finish, commits=commits, handoffs=handoffs)


def _handoff_run(driver: str | None) -> tuple[TraceLog, list[RequestSpan]]:
    """Request "a": small (2 batches) -> large (1) -> small (1); "b" stays on small. Times in seconds."""
    log = TraceLog(["small", "large"], cap=100, system="tokenrouter", driver=driver)
    small, large = BatchRecorder(0, 100), BatchRecorder(1, 100)
    small.record(10.0, 10.1, 0.1, [10.0, 10.0], ["a", "b"], [4, 4], 2, 0, 1, 2, 2, False)
    small.record(10.1, 10.2, 0.1, [10.1, 10.1], ["a", "b"], [1, 1], 1, 1, 1, 2, 2, False)  # a hands off
    large.record(10.25, 10.5, 0.25, [10.2], ["a"], [2], 1, 1, 1, 1, 2, False)  # a back
    small.record(10.3, 10.4, 0.1, [10.2], ["b"], [1], 1, 0, 1, 1, 2, False)
    small.record(10.55, 10.6, 0.05, [10.5, 10.4], ["a", "b"], [1, 1], 2, 0, 2, 2, 2, False)
    log.add(small.take() + large.take())
    spans = [RequestSpan.of(_result(0, 9.99, 10.61, [(10.1, 1, "small"), (10.5, 1, "large"), (10.6, 1, "small")],
                                    handoffs=2), "a"),
             RequestSpan.of(_result(1, 9.99, 10.61, [(10.1, 1, "small"), (10.2, 1, "small"), (10.4, 1, "small"),
                                                     (10.6, 1, "small")]), "b")]
    return log, spans


@pytest.mark.parametrize("driver", [None, "lock-step driver"])
def test_the_document_has_a_track_per_model_flows_per_hand_off_and_nested_request_slices(driver: str | None) -> None:
    log, spans = _handoff_run(driver)
    doc = chrome_trace(log, ["small", "large"], "tokenrouter", spans)
    assert check_trace_events(doc) == []
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in slices] == ["extend", "decode", "extend", "decode", "decode"]
    tracks = {e["args"]["model"]: (e["pid"], e["tid"]) for e in slices}
    assert tracks == ({"small": (1, 1), "large": (2, 1)} if driver is None else {"small": (1, 1), "large": (1, 2)})
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and "name" in e["args"]}
    if driver is not None:
        assert names[(1, 0)] == driver and names[(1, 2)] == "large"
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(ends) == 2 and doc["otherData"]["tokenrouter"]["handoff_flows"] == 2
    # time 0 is the first arrival (9.99 s); the first flow leaves small's 2nd batch (10.1-10.2 s) and lands at
    # large's launch (10.25 s)
    first_s, first_f = starts[0], ends[0]
    assert 110_000 <= first_s["ts"] < 210_000 and (first_s["pid"], first_s["tid"]) == tracks["small"]
    assert first_f["ts"] == pytest.approx(260_000) and (first_f["pid"], first_f["tid"]) == tracks["large"]
    runs = [e["name"] for e in events if e.get("id") == "request-a" and e["ph"] == "b"]
    assert runs == ["request 0", "on small", "on large", "on small"]
    b_runs = [e["name"] for e in events if e.get("id") == "request-b" and e["ph"] == "b"]
    assert b_runs == ["request 1", "on small"]


def test_without_batch_records_the_runs_come_from_the_commits() -> None:
    spans = [RequestSpan.of(_result(3, 1.0, 2.0, [(1.2, 2, "small"), (1.5, 1, "large"), (1.9, 3, "small")]))]
    doc = chrome_trace(None, ["small", "large"], "query_routing", spans)
    assert check_trace_events(doc) == []
    runs = [(e["name"], e["ts"]) for e in doc["traceEvents"] if e["ph"] == "b"]
    assert runs == [("request 3", 0.0), ("on small", 0.0), ("on large", pytest.approx(200_000)),
                    ("on small", pytest.approx(500_000))]
    assert summarize(doc)["models"] == {"small": {"batches": 0}, "large": {"batches": 0}}


def test_the_summary_figures_match_the_records() -> None:
    log, spans = _handoff_run(None)
    figures = summarize(chrome_trace(log, ["small", "large"], "tokenrouter", spans))
    assert figures["window_s"] == pytest.approx(0.62) and figures["handoffs"] == 2 and figures["flows"] == 2
    small, large = figures["models"]["small"], figures["models"]["large"]
    assert small["batches"] == 4 and large["batches"] == 1
    assert small["busy_s"] == pytest.approx(0.35) and small["busy_fraction"] == pytest.approx(0.35 / 0.62)
    # small's gaps: 10.2 -> 10.3 (0.1 s), 10.4 -> 10.55 (0.15 s)
    assert small["idle_gaps"] == 3 and small["idle_s"] == pytest.approx(0.25)
    assert small["idle_gap_p50_ms"] == pytest.approx(100.0) and small["mean_batch_size"] == pytest.approx(7 / 4)
    # waits on small: batch 4: b 0.1 (10.2 -> 10.3, idle); batch 5: a 0.05 idle, b 0.15 idle
    assert small["wait_busy_s"] == pytest.approx(0.0) and small["wait_idle_s"] == pytest.approx(0.3)
    assert large["wait_idle_s"] == pytest.approx(0.05) and large["idle_gaps"] == 0
    text = format_summary(figures, "run")
    assert "small" in text and "56.5%" in text


def test_a_servers_trace_reads_back_as_its_records(tmp_path) -> None:
    log, spans = _handoff_run(None)
    doc = chrome_trace(log, ["small", "large"], "tokenrouter", spans)
    back = records_from_chrome(load_trace(write_trace(tmp_path / "t.json", doc)), 1)
    want = sorted(log.batches, key=lambda b: b.launch)
    assert len(back) == len(want)
    for got, rec in zip(back, want, strict=True):
        assert got.model == 1 and got.rids == []
        assert got.launch == pytest.approx(rec.launch, abs=1e-8) and got.end == pytest.approx(rec.end, abs=1e-8)
        assert (got.rows, got.input_tokens, got.committed, got.handoffs, got.threshold) == \
            (rec.rows, rec.input_tokens, rec.committed, rec.handoffs, rec.threshold)
        assert got.busy_wait_s == pytest.approx(rec.busy_wait_s, abs=1e-6)


def test_load_trace_names_what_is_wrong_in_one_line(tmp_path) -> None:
    with pytest.raises(UserError, match="no such file .*runtime.trace=true"):
        load_trace(tmp_path)
    (tmp_path / "trace.json").write_text("{")
    with pytest.raises(UserError, match="not a readable trace"):
        load_trace(tmp_path)
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    with pytest.raises(UserError, match="not a TokenRouter trace"):
        load_trace(tmp_path)


def _long_run(batches: int, rows: int) -> tuple[TraceLog, list[RequestSpan]]:
    """`rows` requests of 64 tokens in flight, every batch on the other model (a hand-off flow per token)."""
    log = TraceLog(["small", "large"], cap=batches, system="tokenrouter")
    recorders, spans, active, t, nxt = [BatchRecorder(0, batches), BatchRecorder(1, batches)], [], {}, 0.0, 0
    for k in range(batches):
        while len(active) < rows:
            active[str(nxt)], nxt = (t, []), nxt + 1
        rids = list(active)
        recorders[k % 2].record(t, t + 0.005, 0.004, [t] * rows, rids, [1] * rows, rows, rows, 4, rows, rows, False)
        for rid in rids:
            arrival, commits = active[rid]
            commits.append((t, 1, log.models[k % 2]))
            if len(commits) == 64:
                del active[rid]
                spans.append(RequestSpan(int(rid), arrival, arrival + 0.005, t, "length", commits, 63, rid))
        t += 0.005
    log.add(recorders[0].take() + recorders[1].take())
    return log, spans


def test_a_written_trace_is_the_document_streamed_in_bounded_memory(tmp_path) -> None:
    """Issue #43 item 11: `serve` built the whole document before writing it, ~17x what the records hold (~40 KiB
    per batch of 16 rows: ~4 GiB at the old default cap of 100,000 batches per model). Streamed, writing adds at
    most twice what the records hold (here every token is a run of its own: the runs index is as big as the rows)."""
    log, spans = _handoff_run(None)
    path = write_chrome_trace(tmp_path / "small.json", log, ["small", "large"], "tokenrouter", spans)
    assert load_trace(path) == chrome_trace(log, ["small", "large"], "tokenrouter", spans)
    tracemalloc.start()
    try:
        log, spans = _long_run(batches=2000, rows=16)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        path = write_chrome_trace(tmp_path / "long.json", log, log.models, "tokenrouter", spans)
        extra = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    doc = load_trace(path)
    assert len(doc["traceEvents"]) > WRITE_EVENTS and check_trace_events(doc) == []
    assert doc["otherData"]["tokenrouter"]["batches"] == 2000
    assert extra < 2 * held, f"writing took {extra / 2**20:.1f} MiB beside the {held / 2**20:.1f} MiB of records"
