"""What a client asks of any serving system and what it gets back: shared by the runtime, every baseline
and the benchmark runner, so results of different systems land in the same `requests.jsonl` schema."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tokenrouter.engine.base import SamplingParams


@dataclass
class GenerationRequest:
    """One request. `seed` drives routing decisions (and sampling when the sampling params carry none)."""

    prompt_ids: list[int]
    max_new_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    index: int = 0  # position in the workload (stable across systems and runs)
    stop_token_ids: list[int] | None = None  # None: the entry model's EOS ids
    min_new_tokens: int = 0  # no stop token is sampled before this many output tokens (min_tokens)
    # Return the last step's next-token logits / last hidden state in the result's `extra` ("logits",
    # "hidden": lists of floats), e.g. for an external dispatcher that routes itself (Std. Serving).
    return_logits: bool = False
    return_hidden: bool = False


@dataclass
class GenerationResult:
    """A finished request. Times are `time.perf_counter()` seconds in the client's process."""

    index: int
    prompt_ids: list[int]
    output_ids: list[int]
    finish_reason: str  # "stop" | "length" | "error"
    tokens_per_model: dict[str, int] = field(default_factory=dict)  # model name -> committed tokens
    handoffs: int = 0  # hand-offs between models for this request
    arrival_s: float = 0.0
    first_token_s: float | None = None
    finish_s: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # One entry per commit event, in output order: (perf_counter seconds it reached the client, tokens, model).
    # Why kept: inter-token latencies (an extend after a hand-off commits several tokens at once) and the
    # routing trace (which model committed each output token) come from it. Empty when a system cannot tell.
    commits: list[tuple[float, int, str]] = field(default_factory=list)

    @property
    def latency_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    def _kept_commits(self) -> list[tuple[float, int, str]]:
        """The commit events clipped to `output_ids` (a stop string or max_tokens can cut the last ones)."""
        kept, left = [], len(self.output_ids)
        for t, n, model in self.commits:
            if left <= 0:
                break
            kept.append((t, min(n, left), model))
            left -= n
        return kept

    def model_runs(self) -> list[list[Any]]:
        """Which model committed each output token, run-length encoded: [[model, tokens], ...]."""
        runs: list[list[Any]] = []
        for _, n, model in self._kept_commits():
            if runs and runs[-1][0] == model:
                runs[-1][1] += n
            else:
                runs.append([model, n])
        return runs

    def inter_token_latencies(self) -> list[float]:
        """Seconds between consecutive output tokens after the first, one per token: a commit event of k
        tokens arriving g seconds after the previous one counts as k gaps of g/k (as SGLang's bench_serving
        does for multi-token chunks), so the list has one entry per token after the first event's."""
        kept = self._kept_commits()
        gaps: list[float] = []
        for (t0, _, _), (t1, n, _) in zip(kept, kept[1:], strict=False):
            gaps.extend([(t1 - t0) / n] * n)
        return gaps

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["latency_s"] = self.latency_s
        d["ttft_s"] = self.ttft_s
        del d["commits"]
        d["model_runs"] = self.model_runs()
        # [[ms after arrival, tokens], ...] per commit event: enough to recompute every latency statistic
        d["commit_ms"] = [[round((t - self.arrival_s) * 1e3, 3), n] for t, n, _ in self._kept_commits()]
        return d
