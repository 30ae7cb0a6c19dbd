"""Run metrics (the `summary.json` fields); RouteLLM's APGR and CPT are in `baselines.routellm_metrics`.

Two throughputs on purpose: the paper's serving tables use total output tokens / elapsed (system capacity),
its Pareto study uses each request's own output tokens / latency averaged over requests (what one user sees).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # importing it at run time would pull in torch for a table of numbers
    from tokenrouter.results import GenerationResult


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion: sane at 0/n and n/n, unlike the normal approximation."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


def _stat(values: list[float], fn: Any) -> float | None:
    return float(fn(values)) if values else None


def summarize(
    results: Sequence[GenerationResult],
    elapsed_s: float,
    model_names: Sequence[str],
    correct: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """The summary of one run. Failed requests count in `errors` and are left out of latency statistics
    (their partial output still counts as produced tokens); `correct` is per result, in the same order."""
    ok = [r for r in results if r.finish_reason != "error"]
    output_tokens = sum(len(r.output_ids) for r in results)
    latencies = [r.latency_s for r in ok]
    ttfts = [t for t in (r.ttft_s for r in ok) if t is not None]
    per_request = [len(r.output_ids) / r.latency_s for r in ok if r.latency_s > 0]
    committed = {name: 0 for name in model_names}
    for r in results:
        for name, count in r.tokens_per_model.items():
            committed[name] = committed.get(name, 0) + count
    total_committed = sum(committed.values())
    router_calls = [r.extra["router_calls"] for r in results if "router_calls" in r.extra]
    summary: dict[str, Any] = {
        "model_names": list(model_names),
        "num_requests": len(results),
        "errors": len(results) - len(ok),
        "elapsed_s": elapsed_s,
        "output_tokens": output_tokens,
        "prompt_tokens": sum(len(r.prompt_ids) for r in results),
        "throughput_tok_s": output_tokens / elapsed_s if elapsed_s > 0 else None,
        # time-averaged requests in flight (Little's law): N for a busy closed loop, load for open-loop arrivals
        "mean_in_flight": sum(r.latency_s for r in results) / elapsed_s if elapsed_s > 0 else None,
        "per_request_throughput_tok_s": _stat(per_request, np.mean),
        "mean_output_tokens": output_tokens / len(results) if results else None,
        "mean_latency_s": _stat(latencies, np.mean),
        "p50_latency_s": _stat(latencies, np.median),
        "p99_latency_s": _stat(latencies, lambda v: np.percentile(v, 99)),
        "mean_ttft_s": _stat(ttfts, np.mean),
        "p99_ttft_s": _stat(ttfts, lambda v: np.percentile(v, 99)),
        "tokens_per_model": committed,
        "token_share": {n: (c / total_committed if total_committed else None) for n, c in committed.items()},
        "large_token_share": committed[model_names[-1]] / total_committed
        if total_committed and model_names
        else None,
        "handoffs_per_request": _stat([r.handoffs for r in results], np.mean),
        "router_calls_per_request": _stat(router_calls, np.mean),
        "finish_reasons": {
            k: sum(r.finish_reason == k for r in results) for k in sorted({r.finish_reason for r in results})
        },
    }
    if correct is not None:
        if len(correct) != len(results):
            raise ValueError(f"correct has {len(correct)} entries for {len(results)} results")
        hits = int(sum(bool(c) for c in correct))
        low, high = wilson_interval(hits, len(correct)) if correct else (None, None)
        summary.update(
            num_graded=len(correct),
            num_correct=hits,
            accuracy=hits / len(correct) if correct else None,
            accuracy_ci95_low=low,
            accuracy_ci95_high=high,
        )
    return summary


def steady_throughput(results: Sequence[GenerationResult], clients: int) -> float | None:
    """Closed loop: output tokens per second from the first arrival to the last, while every client had a
    request in flight (requests still running at the last arrival count pro rata by time). Total / elapsed
    also holds the drain tail, where fewer than `clients` requests remain (long when requests finish at
    different paces); this is what a closed-loop model such as tokenrouter.perfmodel predicts. None when the
    workload fits in one wave (no request arrived after another finished)."""
    if len(results) <= clients:
        return None
    start = min(r.arrival_s for r in results)
    end = max(r.arrival_s for r in results)
    if end <= start:
        return None
    tokens = 0.0
    for r in results:
        if r.finish_s <= end:
            tokens += len(r.output_ids)
        elif r.arrival_s < end:
            tokens += len(r.output_ids) * (end - r.arrival_s) / (r.finish_s - r.arrival_s)
    return tokens / (end - start)
