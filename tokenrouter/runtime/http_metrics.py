"""Prometheus text exposition for the HTTP server: its own request counters and latency histograms, plus
the front end's per-model statistics (steps, batch sizes, tokens, hand-offs) as gauges.

Hand-written (the format is a few lines) so the server needs no extra dependency.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tokenrouter.results import GenerationResult

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip(self.buckets, self.counts, strict=True):
            cumulative += count
            out.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.n}')
        out.append(f"{name}_sum {self.total:.6f}")
        out.append(f"{name}_count {self.n}")
        return out


@dataclass
class ServerMetrics:
    """Counters the HTTP layer keeps itself (the front end's stats are added at render time)."""

    requests: Counter[tuple[str, int]] = field(default_factory=Counter)  # (endpoint, status) -> count
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_model: Counter[str] = field(default_factory=Counter)
    handoffs: int = 0
    running: int = 0
    latency: Histogram = field(default_factory=Histogram)
    ttft: Histogram = field(default_factory=Histogram)

    def finished(self, endpoint: str, status: int, result: GenerationResult | None) -> None:
        self.requests[(endpoint, status)] += 1
        if result is None:
            return
        self.prompt_tokens += len(result.prompt_ids)
        self.completion_tokens += len(result.output_ids)
        self.tokens_per_model.update(result.tokens_per_model)
        self.handoffs += result.handoffs
        if result.finish_s > result.arrival_s > 0:
            self.latency.observe(result.latency_s)
        if result.ttft_s is not None:
            self.ttft.observe(result.ttft_s)

    def render(self, frontend_stats: dict[str, Any]) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        family("tokenrouter_http_requests_total", "counter", "HTTP requests answered, by endpoint and status.")
        for (endpoint, status), count in sorted(self.requests.items()):
            lines.append(f'tokenrouter_http_requests_total{{endpoint="{endpoint}",status="{status}"}} {count}')
        family("tokenrouter_http_requests_running", "gauge", "Generation requests in flight.")
        lines.append(f"tokenrouter_http_requests_running {self.running}")
        family("tokenrouter_prompt_tokens_total", "counter", "Prompt tokens of finished requests.")
        lines.append(f"tokenrouter_prompt_tokens_total {self.prompt_tokens}")
        family("tokenrouter_generation_tokens_total", "counter", "Output tokens of finished requests.")
        lines.append(f"tokenrouter_generation_tokens_total {self.completion_tokens}")
        family("tokenrouter_model_tokens_total", "counter", "Committed output tokens by the model that produced them.")
        for model, count in sorted(self.tokens_per_model.items()):
            lines.append(f'tokenrouter_model_tokens_total{{model="{_escape(model)}"}} {count}')
        family("tokenrouter_handoffs_total", "counter", "Hand-offs between models in finished requests.")
        lines.append(f"tokenrouter_handoffs_total {self.handoffs}")
        family("tokenrouter_request_latency_seconds", "histogram", "End-to-end latency of finished requests.")
        lines.extend(self.latency.lines("tokenrouter_request_latency_seconds"))
        family("tokenrouter_time_to_first_token_seconds", "histogram", "Time to first token of finished requests.")
        lines.extend(self.ttft.lines("tokenrouter_time_to_first_token_seconds"))
        lines.extend(_stats_gauges(frontend_stats))
        return "\n".join(lines) + "\n"


def _stats_gauges(stats: dict[str, Any]) -> list[str]:
    """The front end's stats as gauges: every numeric leaf under `models.<name>` becomes
    `tokenrouter_model_<key>{model="<name>"}`, every other top-level numeric leaf `tokenrouter_<key>`;
    deeper keys and list items become labels (routing counts by destination, threshold tables)."""
    samples: dict[str, list[str]] = {}
    for model, values in sorted((stats.get("models") or {}).items()):
        for (metric, labels), value in _numeric_leaves(values, ""):
            name = f"tokenrouter_model_{metric}"
            label_text = ",".join([f'model="{_escape(str(model))}"', *labels])
            samples.setdefault(name, []).append(f"{name}{{{label_text}}} {_number(value)}")
    rest = {k: v for k, v in stats.items() if k != "models"}
    for (metric, labels), value in _numeric_leaves(rest, ""):
        name = f"tokenrouter_{metric}"
        samples.setdefault(name, []).append(f"{name}{{{','.join(labels)}}} {_number(value)}" if labels
                                            else f"{name} {_number(value)}")
    lines: list[str] = []
    for name, rows in samples.items():
        lines.append(f"# HELP {name} Front-end statistic (TokenRouterFrontend.stats()).")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(rows)
    return lines


def _numeric_leaves(value: Any, prefix: str, labels: tuple[str, ...] = ()) -> list[tuple[tuple[str, list[str]], float]]:
    """(metric name, labels) -> value for every numeric leaf: first-level keys name the metric, deeper
    mapping keys and list positions become labels (`key`, `i0`, ...)."""
    out: list[tuple[tuple[str, list[str]], float]] = []
    if isinstance(value, int | float):  # bool included
        out.append(((prefix, list(labels)), float(value)))
    elif isinstance(value, dict):
        for k, v in value.items():
            if prefix:
                out.extend(_numeric_leaves(v, prefix, (*labels, f'key{len(labels) or ""}="{_escape(str(k))}"')))
            else:
                out.extend(_numeric_leaves(v, _metric_name(str(k)), labels))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            out.extend(_numeric_leaves(v, prefix, (*labels, f'i{len(labels)}="{i}"')))
    return out


def _metric_name(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text).lower()


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
