"""`runtime.trace` end to end on the sim pair: real bench runs of TokenRouter (subserver processes), lock-step and
Std. Serving (model server processes), and a real `tokenrouter serve` stopped by SIGTERM. The trace must account
for every batch and token the systems counted, be valid Trace Event JSON, and summarize to what summary.json says."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tokenrouter.cli import main
from tokenrouter.trace.summary import load_trace, summarize

from ..runtime.http_helpers import SIM as HTTP_SIM
from ..runtime.http_helpers import start_server
from .trace_format import check_trace_events

SIM = ["models=sim-r2r", "models.members.0.sim.latency_ms=1.0", "models.members.1.sim.latency_ms=3.0",
       "algorithm=bernoulli", "algorithm.route_prob=0.35", "workload=synthetic", "workload.num_requests=8",
       "workload.output_tokens=20", "concurrency=4", "runtime.trace=true"]


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("traced")
    assert main(["bench", "-m", "system=tokenrouter,lockstep", *SIM, f"hydra.sweep.dir={out}"]) == 0
    yield out


def trace_processor_problems(path: Path) -> list[str] | None:
    """Perfetto's own trace processor's view of the file, where it can run (None: it cannot here)."""
    binary = os.environ.get("TRACE_PROCESSOR_BIN")
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError:
        return None
    if binary is None:
        return None  # it would download its binary from the internet
    with TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=binary)) as tp:
        slices = tp.query("select count(*) as n from slice").as_pandas_dataframe()["n"][0]
        return [] if slices > 0 else ["no slices"]


@pytest.mark.parametrize("point, system", [("0", "tokenrouter"), ("1", "lockstep")])
def test_the_trace_accounts_for_every_batch_and_token(sweep: Path, point: str, system: str) -> None:
    run = sweep / point
    doc = load_trace(run)
    assert check_trace_events(doc) == []
    assert trace_processor_problems(run / "trace.json") in (None, [])
    summary = json.loads((run / "summary.json").read_text())
    meta = doc["otherData"]["tokenrouter"]
    assert meta["system"] == system and meta["capped"] == [] and (meta["driver"] is not None) == (system == "lockstep")
    batches = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    for model in ("small", "large"):
        own = [e for e in batches if e["args"]["model"] == model]
        assert len(own) == summary["stats"]["models"][model]["steps"]
        assert sum(e["args"]["committed"] for e in own) == summary["tokens_per_model"][model]
    results = rows(run)
    assert summarize(doc) == summary["trace"]
    assert summary["trace"]["handoffs"] == sum(r["handoffs"] for r in results) > 0
    assert summary["trace"]["flows"] == summary["trace"]["handoffs"]  # both systems name requests in batches
    assert summary["trace"]["requests"] == 8
    # samples.json: each sampled token carries the model that committed it, as requests.jsonl's model_runs say
    samples = json.loads((run / "samples.json").read_text())
    by_index = {r["index"]: r for r in results}
    for sample in samples["samples"]:
        expected = [model for model, n in by_index[sample["index"]]["model_runs"] for _ in range(n)]
        assert [samples["models"][m] for _, m in sample["tokens"]] == expected


def test_tokenrouter_and_lockstep_differ_where_the_paper_says(sweep: Path) -> None:
    """Lock-step steps every model in one driver: while the large model steps, requests on the small one wait
    with their model idle; TokenRouter's small model keeps stepping (busier, fewer idle waits per token)."""
    tr, ls = (json.loads((sweep / p / "summary.json").read_text())["trace"]["models"]["small"] for p in "01")
    assert ls["wait_idle_s"] > tr["wait_idle_s"]
    assert tr["busy_fraction"] > ls["busy_fraction"]


def test_trace_summarize_prints_runs_side_by_side(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["trace", "summarize", str(sweep / "0"), str(sweep / "1")]) == 0
    out = capsys.readouterr().out
    assert "(tokenrouter)" in out and "(lockstep)" in out and out.count("small") == 2 and "busy" in out
    assert main(["trace", "summarize", "--json", str(sweep / "0")]) == 0
    assert json.loads(capsys.readouterr().out)[str(sweep / "0")]["models"]["large"]["batches"] > 0
    assert main(["trace", "summarize", str(sweep)]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_cap_bounds_the_trace_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "system=tokenrouter", *SIM, "runtime.trace_max_batches=3", f"hydra.run.dir={tmp_path}"]) == 0
    assert "reached runtime.trace_max_batches=3" in capsys.readouterr().err
    doc = load_trace(tmp_path)
    assert sorted(doc["otherData"]["tokenrouter"]["capped"]) == ["large", "small"]
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X"]) == 6


def test_std_serving_draws_its_model_servers_batches(tmp_path: Path) -> None:
    assert main(["bench", "system=std_serving", *SIM, f"hydra.run.dir={tmp_path}"]) == 0
    doc = load_trace(tmp_path)
    assert check_trace_events(doc) == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    for model in ("small", "large"):
        own = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["args"]["model"] == model]
        # one server step per token the dispatcher asked for: at least one per committed token
        assert len(own) >= 1 and sum(e["args"]["committed"] for e in own) >= summary["tokens_per_model"][model]
    assert summary["trace"]["handoffs"] == sum(r["handoffs"] for r in rows(tmp_path))


@pytest.mark.parametrize("value, error", [("maybe", "runtime.trace must be true or false"),
                                          ("0", "runtime.trace_max_batches must be an integer >= 1")])
def test_bad_trace_settings_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, value: str,
                                         error: str) -> None:
    key = "runtime.trace" if value == "maybe" else "runtime.trace_max_batches"
    assert main(["bench", "system=tokenrouter", *SIM, f"{key}={value}", f"hydra.run.dir={tmp_path}"]) == 2
    assert error in capsys.readouterr().err


def test_serve_writes_its_trace_when_stopped(tmp_path: Path) -> None:
    trace = tmp_path / "served.json"
    server = start_server([*HTTP_SIM, "runtime.trace=true", f"runtime.trace_file={trace}"], tmp_path)
    try:
        for prompt in ("12+34=", "5+6="):
            body = {"model": "sim-r2r", "prompt": [1, 2, 3], "max_tokens": 12, "ignore_eos": True}
            assert httpx.post(f"{server.url}/v1/completions", json=body, timeout=30).status_code == 200, prompt
    finally:
        assert server.stop(signal.SIGTERM) == 0
    err = server.proc.stderr.read() if server.proc.stderr else ""
    assert f"-> {trace}" in err
    doc = load_trace(trace)
    assert check_trace_events(doc) == []
    figures = summarize(doc)
    assert figures["requests"] == 2
    committed = sum(e["args"]["committed"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert committed == 24
