"""Prometheus metrics of the HTTP server (`/metrics`), through prometheus_client with one registry per app.

Names: vLLM's metric names and labels with a `tokenrouter:` prefix instead of `vllm:` (a vLLM Grafana
dashboard works after replacing the prefix; a server that claimed `vllm:` would be mistaken for one), all
labelled `model_name`: counters `tokenrouter:prompt_tokens_total`, `tokenrouter:generation_tokens_total`,
`tokenrouter:request_success_total{finished_reason}`; histograms `tokenrouter:time_to_first_token_seconds`,
`tokenrouter:time_per_output_token_seconds`, `tokenrouter:inter_token_latency_seconds`,
`tokenrouter:e2e_request_latency_seconds`, `tokenrouter:request_queue_time_seconds`; gauges
`tokenrouter:num_requests_running`, `tokenrouter:num_requests_waiting`, `tokenrouter:kv_cache_usage_perc`
(the fullest model's reserved KV fraction, 1 = full). The earlier `tokenrouter_*` names stay (HTTP requests
by endpoint and status, tokens per model, hand-offs), and every numeric front-end statistic is a gauge
`tokenrouter_model_<key>{model=...}` (steps, routing counts by destination, ...).

Latencies are measured from the HTTP request's arrival. Queue time is arrival until the front end admits
the request (body, tokenization, chat template); the front end admits at once, and a subserver's batching
wait shows in `tokenrouter_model_mean_queue_wait_ms`. Inter-token latency is observed per streamed piece
(an extend after a hand-off commits several tokens at once), time per output token per request.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tokenrouter.generation import GenerationResult

if TYPE_CHECKING:
    from tokenrouter.server.output import Output

LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 1.0, 2.5)
P = "tokenrouter:"


class ServerMetrics:
    """The HTTP layer's own metrics; the front end's stats join at scrape time (`render`)."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        self._stats = _StatsCollector()
        self.registry.register(self._stats)
        r, m = self.registry, ["model_name"]

        def hist(name: str, doc: str, buckets: tuple[float, ...] = LATENCY_BUCKETS_S) -> Any:
            return Histogram(P + name, doc, m, registry=r, buckets=buckets).labels(model_name)

        self.prompt_tokens = Counter(P + "prompt_tokens", "Prompt tokens of finished requests.", m,
                                     registry=r).labels(model_name)
        self.generation_tokens = Counter(P + "generation_tokens", "Output tokens of finished requests.", m,
                                         registry=r).labels(model_name)
        self.success = Counter(P + "request_success", "Finished requests by finish reason.",
                               [*m, "finished_reason"], registry=r)
        self.ttft = hist("time_to_first_token_seconds", "Time to first token.")
        self.tpot = hist("time_per_output_token_seconds", "Mean time per output token after the first.",
                         TOKEN_BUCKETS_S)
        self.itl = hist("inter_token_latency_seconds", "Time between streamed pieces.", TOKEN_BUCKETS_S)
        self.e2e = hist("e2e_request_latency_seconds", "End-to-end request latency.")
        self.queue = hist("request_queue_time_seconds", "Arrival until the front end admits the request.")
        self.running = Gauge(P + "num_requests_running", "Generation requests in flight.", m,
                             registry=r).labels(model_name)
        self.waiting = Gauge(P + "num_requests_waiting", "Requests waiting for KV space.", m,
                             registry=r).labels(model_name)
        self.kv_usage = Gauge(P + "kv_cache_usage_perc", "Reserved KV fraction of the fullest model (1 = full).",
                              m, registry=r).labels(model_name)
        # the earlier names, kept for existing scrapers and tests
        self.requests = Counter("tokenrouter_http_requests", "HTTP requests answered, by endpoint and status.",
                                ["endpoint", "status"], registry=r)
        self.http_running = Gauge("tokenrouter_http_requests_running", "Generation requests in flight.",
                                  registry=r)
        self.legacy_prompt = Counter("tokenrouter_prompt_tokens", "Prompt tokens of finished requests.",
                                     registry=r)
        self.legacy_generation = Counter("tokenrouter_generation_tokens", "Output tokens of finished requests.",
                                         registry=r)
        self.model_tokens = Counter("tokenrouter_model_tokens", "Committed output tokens by the model that "
                                    "produced them.", ["model"], registry=r)
        self.handoffs = Counter("tokenrouter_handoffs", "Hand-offs between models in finished requests.",
                                registry=r)
        self.legacy_latency = Histogram("tokenrouter_request_latency_seconds", "End-to-end latency of finished "
                                        "requests.", registry=r, buckets=LATENCY_BUCKETS_S)
        self.legacy_ttft = Histogram("tokenrouter_time_to_first_token_seconds", "Time to first token of "
                                     "finished requests.", registry=r, buckets=LATENCY_BUCKETS_S)

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        self.running.inc()
        self.http_running.inc()
        try:
            yield
        finally:
            self.running.dec()
            self.http_running.dec()

    def answered(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def finished(self, endpoint: str, status: int, result: GenerationResult | None, out: Output) -> None:
        """One generation request answered; a finished one (`result`) adds its tokens and latencies."""
        self.answered(endpoint, status)
        if result is None:
            return
        prompt, output = len(result.prompt_ids), len(result.output_ids)
        for counter, n in ((self.prompt_tokens, prompt), (self.legacy_prompt, prompt),
                           (self.generation_tokens, output), (self.legacy_generation, output),
                           (self.handoffs, result.handoffs)):
            counter.inc(n)
        for model, n in result.tokens_per_model.items():
            self.model_tokens.labels(model).inc(n)
        self.success.labels(self.model_name, result.finish_reason).inc()
        done = time.perf_counter()
        self.e2e.observe(done - out.start)
        self.legacy_latency.observe(done - out.start)
        self.queue.observe(max(0.0, result.arrival_s - out.start))
        times = out.token_times
        if times:
            self.ttft.observe(times[0] - out.start)
            self.legacy_ttft.observe(times[0] - out.start)
            for before, after in zip(times, times[1:], strict=False):
                self.itl.observe(after - before)
            if output > 1:
                self.tpot.observe((times[-1] - times[0]) / (output - 1))

    def render(self, frontend_stats: dict[str, Any]) -> bytes:
        """The exposition text, with the front end's current stats."""
        models = (frontend_stats.get("models") or {}).values()
        self.waiting.set(sum(m.get("num_waiting", 0) for m in models))
        self.kv_usage.set(max((m.get("kv_cache_usage", 0.0) for m in models), default=0.0))
        self._stats.stats = frontend_stats
        return generate_latest(self.registry)


class _StatsCollector(Collector):
    """The front end's stats as gauges: every numeric leaf under `models.<name>` becomes
    `tokenrouter_model_<key>{model="<name>"}`, every other top-level numeric leaf `tokenrouter_<key>`;
    deeper keys and list items become labels (routing counts by destination, threshold tables)."""

    def __init__(self) -> None:
        self.stats: dict[str, Any] = {}

    def describe(self) -> Iterable[Metric]:
        return []  # the names depend on the stats: none to reserve at registration

    def collect(self) -> Iterable[Metric]:
        families: dict[str, tuple[list[str], list[tuple[list[str], float]]]] = {}

        def add(name: str, labels: list[tuple[str, str]], value: float) -> None:
            names, rows = families.setdefault(name, ([k for k, _ in labels], []))
            if [k for k, _ in labels] == names:
                rows.append(([v for _, v in labels], value))

        for model, values in sorted((self.stats.get("models") or {}).items()):
            for (metric, labels), value in _numeric_leaves(values, ""):
                add(f"tokenrouter_model_{metric}", [("model", str(model)), *labels], value)
        rest = {k: v for k, v in self.stats.items() if k != "models"}
        for (metric, labels), value in _numeric_leaves(rest, ""):
            add(f"tokenrouter_{metric}", labels, value)
        for name, (label_names, rows) in families.items():
            family = GaugeMetricFamily(name, "Front-end statistic (TokenRouterFrontend.stats()).",
                                       labels=label_names)
            for label_values, value in rows:
                family.add_metric(label_values, value)
            yield family


def _numeric_leaves(value: Any, prefix: str, labels: tuple[tuple[str, str], ...] = ()
                    ) -> list[tuple[tuple[str, list[tuple[str, str]]], float]]:
    """(metric name, labels) -> value for every numeric leaf: first-level keys name the metric, deeper
    mapping keys and list positions become labels (`key`, `i0`, ...)."""
    out: list[tuple[tuple[str, list[tuple[str, str]]], float]] = []
    if isinstance(value, int | float):  # bool included
        out.append(((prefix, list(labels)), float(value)))
    elif isinstance(value, dict):
        for k, v in value.items():
            if prefix:
                out.extend(_numeric_leaves(v, prefix, (*labels, (f"key{len(labels) or ''}", str(k)))))
            else:
                out.extend(_numeric_leaves(v, _metric_name(str(k)), labels))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            out.extend(_numeric_leaves(v, prefix, (*labels, (f"i{len(labels)}", str(i)))))
    return out


def _metric_name(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text).lower()
