"""Run metrics (the `summary.json` fields); RouteLLM's APGR and CPT are in `tokenrouter.baselines.routellm_metrics`.

Two throughputs on purpose: the paper's serving tables use total output tokens / elapsed (system capacity),
its Pareto study uses each request's own output tokens / latency averaged over requests (what one user sees).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # importing it at run time would pull in torch for a table of numbers
    from tokenrouter.generation import GenerationResult


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


SLO_METRICS = ("ttft", "tpot", "e2el")


def _ms_stats(name: str, seconds: Sequence[float]) -> dict[str, float | None]:
    """mean / median / std / p90 / p99 of `seconds` in ms, under bench_serving's key names."""
    ms = np.asarray(seconds, dtype=float) * 1e3
    stats = {"mean": np.mean, "median": np.median, "std": np.std,
             "p90": lambda v: np.percentile(v, 90), "p99": lambda v: np.percentile(v, 99)}
    return {f"{stat}_{name}_ms": (float(fn(ms)) if ms.size else None) for stat, fn in stats.items()}


def tpot_s(result: GenerationResult) -> float | None:
    """Time per output token after the first, as bench_serving defines it: (e2e - TTFT) / (tokens - 1)."""
    n = len(result.output_ids)
    if n < 2 or result.ttft_s is None:
        return None
    return (result.latency_s - result.ttft_s) / (n - 1)


def serving_metrics(results: Sequence[GenerationResult], duration_s: float,
                    slo_ms: dict[str, float] | None = None) -> dict[str, Any]:
    """The serving figures researchers compare servers by, under the names and units of SGLang's
    `bench_serving` / `vllm bench serve` (ms; throughputs per second of `duration`), so a TokenRouter run
    and a run of those tools against any server line up column for column. Failed requests count in `failed`
    only. ITL is per output token (a multi-token commit event counts as that many equal gaps); runs whose
    system records no commit times (official R2R) have no ITL. Goodput: completed requests meeting every
    SLO given (`ttft`, `tpot`, `e2el`, in ms), per second, as bench_serving's `--goodput`."""
    ok = [r for r in results if r.finish_reason != "error"]
    inputs = sum(len(r.prompt_ids) for r in ok)
    outputs = sum(len(r.output_ids) for r in ok)
    per_second = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: None)
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [t for t in map(tpot_s, ok) if t is not None]
    itls = [gap for r in ok for gap in r.inter_token_latencies()]
    metrics: dict[str, Any] = {
        "duration": duration_s, "completed": len(ok), "failed": len(results) - len(ok),
        "total_input_tokens": inputs, "total_output_tokens": outputs,
        "request_throughput": per_second(len(ok)), "input_throughput": per_second(inputs),
        "output_throughput": per_second(outputs), "total_token_throughput": per_second(inputs + outputs),
        **_ms_stats("ttft", ttfts), **_ms_stats("tpot", tpots), **_ms_stats("itl", itls),
        **_ms_stats("e2el", [r.latency_s for r in ok]),
    }
    if slo_ms:
        unknown = sorted(set(slo_ms) - set(SLO_METRICS))
        if unknown:
            raise ValueError(f"slo: unknown metric(s) {unknown}; known: {list(SLO_METRICS)}")

        def observed(r: GenerationResult) -> dict[str, float]:
            return {"ttft": (r.ttft_s or 0.0) * 1e3, "tpot": (tpot_s(r) or 0.0) * 1e3, "e2el": r.latency_s * 1e3}

        good = sum(all(observed(r)[k] <= v for k, v in slo_ms.items()) for r in ok)
        metrics.update(goodput_slos_ms=dict(slo_ms), request_goodput=per_second(good),
                       slo_attainment=good / len(results) if results else None)
    return metrics


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
