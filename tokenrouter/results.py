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

    @property
    def latency_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["latency_s"] = self.latency_s
        d["ttft_s"] = self.ttft_s
        return d
