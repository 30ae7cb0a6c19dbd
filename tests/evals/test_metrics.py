"""Run summaries on hand-built results and the Wilson interval."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tokenrouter.evals.metrics import serving_metrics, steady_throughput, summarize, wilson_interval
from tokenrouter.generation import GenerationResult


def result(
    index: int, n_out: int, arrival: float, first: float | None, finish: float, **kw: object
) -> GenerationResult:
    return GenerationResult(
        index=index,
        prompt_ids=[5] * 10,
        output_ids=[7] * n_out,
        finish_reason=kw.pop("finish_reason", "stop"),
        arrival_s=arrival,
        first_token_s=first,
        finish_s=finish,
        **kw,  # type: ignore[arg-type]
    )


def test_summarize_hand_built() -> None:
    results = [
        result(0, 100, 0.0, 0.5, 2.0, tokens_per_model={"small": 80, "large": 20}, handoffs=4),
        result(1, 50, 1.0, 1.2, 2.0, tokens_per_model={"small": 50}, handoffs=0, extra={"router_calls": 50}),
        result(2, 10, 0.0, None, 4.0, finish_reason="error", error="boom", tokens_per_model={"small": 10}),
    ]
    s = summarize(results, elapsed_s=4.0, model_names=["small", "large"], correct=[True, False, False])
    assert s["num_requests"] == 3 and s["errors"] == 1
    assert s["output_tokens"] == 160 and s["prompt_tokens"] == 30
    assert s["throughput_tok_s"] == pytest.approx(40.0)  # 160 tokens / 4 s
    assert s["per_request_throughput_tok_s"] == pytest.approx((100 / 2.0 + 50 / 1.0) / 2)  # errors left out
    assert s["mean_latency_s"] == pytest.approx(1.5) and s["p50_latency_s"] == pytest.approx(1.5)
    assert s["p99_latency_s"] == pytest.approx(1.99)
    assert s["mean_ttft_s"] == pytest.approx((0.5 + 0.2) / 2)
    assert s["tokens_per_model"] == {"small": 140, "large": 20}
    assert s["token_share"]["large"] == pytest.approx(20 / 160) and s["large_token_share"] == pytest.approx(
        0.125
    )
    assert s["handoffs_per_request"] == pytest.approx(4 / 3)
    assert s["router_calls_per_request"] == 50
    assert s["finish_reasons"] == {"error": 1, "stop": 2}
    assert (s["num_graded"], s["num_correct"], s["accuracy"]) == (3, 1, pytest.approx(1 / 3))
    assert 0 < s["accuracy_ci95_low"] < 1 / 3 < s["accuracy_ci95_high"] < 1
    json.dumps(s, allow_nan=False)  # summary.json stays strict JSON


def test_summarize_without_grading_or_results() -> None:
    s = summarize([], elapsed_s=0.0, model_names=["m"])
    assert s["throughput_tok_s"] is None and s["mean_latency_s"] is None and "accuracy" not in s
    assert summarize([], 1.0, ["m"], correct=[])["accuracy"] is None
    with pytest.raises(ValueError, match="2 entries for 1 results"):
        summarize([result(0, 1, 0, 0.1, 1)], 1.0, ["m"], correct=[True, False])


def test_steady_throughput_leaves_out_the_drain_tail() -> None:
    # two closed-loop clients; the last arrival is at t=2, after which one client idles while the other drains
    results = [
        result(0, 100, 0.0, 0.1, 1.0),
        result(1, 100, 0.0, 0.1, 2.0),
        result(2, 100, 1.0, 1.1, 2.0),
        result(3, 100, 2.0, 2.1, 6.0),  # 0 s of it inside the window
        result(4, 40, 1.0, 1.1, 3.0),  # half of its time inside the window: 20 tokens
    ]
    assert steady_throughput(results, clients=2) == pytest.approx((300 + 20) / 2.0)
    assert summarize(results, 6.0, ["m"])["throughput_tok_s"] == pytest.approx(440 / 6.0)  # tail included
    assert steady_throughput(results[:2], clients=2) is None  # one wave: no steady window
    assert steady_throughput([result(0, 5, 0.0, 0.1, 1.0), result(1, 5, 0.0, 0.1, 1.0)], clients=1) is None


def test_wilson_interval() -> None:
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_serving_metrics_use_bench_serving_names_and_per_token_itl() -> None:
    # request 0: 1 token at 0.5 s (small), then an extend of 3 tokens at 1.1 s (large), then 1 at 1.2 s (small)
    commits = [(0.5, 1, "small"), (1.1, 3, "large"), (1.2, 1, "small")]
    results = [
        result(0, 5, 0.0, 0.5, 1.2, commits=commits),
        result(1, 2, 1.0, 1.5, 2.0, commits=[(1.5, 1, "small"), (2.0, 1, "small")]),
        result(2, 0, 0.0, None, 1.0, finish_reason="error", error="boom"),
    ]
    m = serving_metrics(results, duration_s=2.0, slo_ms={"ttft": 500.0, "e2el": 1000.0})
    assert (m["completed"], m["failed"], m["duration"]) == (2, 1, 2.0)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (20, 7)
    assert m["request_throughput"] == pytest.approx(1.0) and m["output_throughput"] == pytest.approx(3.5)
    assert m["input_throughput"] == pytest.approx(10.0) and m["total_token_throughput"] == pytest.approx(13.5)
    assert m["mean_ttft_ms"] == pytest.approx(500.0) and m["std_ttft_ms"] == pytest.approx(0.0)
    # TPOT = (e2e - ttft) / (n - 1): (1.2 - 0.5) / 4 and (1.0 - 0.5) / 1
    assert m["mean_tpot_ms"] == pytest.approx((175.0 + 500.0) / 2)
    # ITL per token: the 3-token commit 0.6 s after the first counts as three gaps of 0.2 s
    itls = sorted([200.0, 200.0, 200.0, 100.0, 500.0])
    assert m["mean_itl_ms"] == pytest.approx(sum(itls) / 5) and m["median_itl_ms"] == pytest.approx(200.0)
    assert m["p99_itl_ms"] == pytest.approx(float(np.percentile(itls, 99)))
    assert m["p90_e2el_ms"] == pytest.approx(float(np.percentile([1200.0, 1000.0], 90)))
    # goodput: request 0 meets TTFT 500 but not e2el 1000; request 1 meets both
    assert m["request_goodput"] == pytest.approx(0.5) and m["slo_attainment"] == pytest.approx(1 / 3)
    assert m["goodput_slos_ms"] == {"ttft": 500.0, "e2el": 1000.0}
    assert "request_goodput" not in serving_metrics(results, 2.0)
    with pytest.raises(ValueError, match="unknown metric"):
        serving_metrics(results, 2.0, {"itl": 1.0})
    json.dumps(serving_metrics([], 0.0), allow_nan=False)


def test_routing_trace_is_clipped_to_the_output() -> None:
    # a stop string cut the output after 4 tokens: the trace ends there too
    r = result(0, 4, 10.0, 10.5, 11.2, commits=[(10.5, 2, "small"), (10.9, 1, "small"), (11.1, 3, "large")])
    assert r.model_runs() == [["small", 3], ["large", 1]]
    assert r.inter_token_latencies() == pytest.approx([0.4, 0.2])
    row = r.to_json()
    assert row["model_runs"] == [["small", 3], ["large", 1]] and "commits" not in row
    assert row["commit_ms"] == [[500.0, 2], [900.0, 1], [1100.0, 1]]
