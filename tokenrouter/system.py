"""The contract every serving system implements: TokenRouter itself and each baseline.

Every system takes the same `GenerationRequest`s and returns the same `GenerationResult`s, so the benchmark
runner, `requests.jsonl` and the reports never special-case a system. It lives in the core, not the harness,
so that baselines are built on the core alone and the runtime's front end can declare that it is one.

The optional hooks are methods with neutral defaults, so the runner calls them on every system instead of
probing for them: override only what a system has.
Per-request failures are results with finish_reason "error" or a raised `UserError`; any other exception
from `generate` means the system itself failed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Self

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, model_specs, plain, seed_value
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.trace.record import TraceLog

# The runner folds the experiment seed into every request's seed (tokenrouter.evals.bench.request_seed), identically for
# every system; a TokenRouter front end would shift request seeds again by its own seed, so it gets 0.
FRONTEND_SEED = 0


class ServingSystem(ABC):
    """A system that serves requests over a model set (`model_names`, entry model first)."""

    model_names: list[str]

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def generate(self, req: GenerationRequest) -> GenerationResult: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """The system's own counters, recorded under summary.json `stats`."""

    async def refresh_stats(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """`stats()` once they are current: a system whose counters reach it with a lag (TokenRouter's ride
        along with its subservers' traffic) asks for fresh ones first; the runner records these."""
        return self.stats()

    def calibrate(self, requests: list[GenerationRequest], texts: list[str]) -> None:
        """Called before `start()` with the whole workload (query-level routing sets its threshold from the
        prompts' scores; TokenRouter sets `runtime.auto_context_tokens` to its mean context)."""

    def reset_stats(self) -> None:
        """Called after the warm-up requests: a system whose `stats()` are per-request costs (Std. Serving's
        breakdown, SGLang's stage timers) measures afresh from here; cumulative counters may stay."""

    def summary_extra(self) -> dict[str, Any]:
        """Extra summary.json fields after the run (RouteLLM's APGR / CPT)."""
        return {}

    def trace_log(self) -> TraceLog | None:
        """With `runtime.trace`: the batches (and finished requests) this system recorded; None for a system
        that records no batches (its trace then shows requests only)."""
        return None

    def batching_thresholds(self, n: int) -> list[int] | None:
        """The delayed-batching thresholds at `n` active requests (recorded, and used for the throughput
        model's prediction); None for a system without delayed batching."""
        return None


@dataclass
class SystemSetup:
    """The parts of an experiment config every system needs, validated once."""

    models: list[ModelSpec]
    algorithm: AlgorithmSpec
    runtime: RuntimeConfig
    seed: int  # the experiment seed: for system-level randomness (e.g. RouteLLM's random router)
    system: dict[str, Any]  # the `system` node as plain data (name + system-specific fields)
    workload_name: str = ""

    @classmethod
    def from_config(cls, cfg: Any) -> SystemSetup:
        system = plain(cfg.get("system")) or {}
        if not isinstance(system, dict) or not system.get("name"):
            raise UserError("system: config needs a `name` (tokenrouter, lockstep, std_serving, ...)")
        workload = cfg.get("workload") or {}
        return cls(
            models=model_specs(cfg.models),
            algorithm=AlgorithmSpec.from_dict(cfg.get("algorithm")),
            runtime=RuntimeConfig.from_dict(cfg.get("runtime")),
            seed=seed_value(cfg.get("seed", 0)),
            system=system,
            workload_name=str(workload.get("name", "")) if hasattr(workload, "get") else "",
        )

    def model(self, name: str | None) -> ModelSpec:
        """The spec of model `name`; a clear error listing the set otherwise."""
        names = [m.name for m in self.models]
        if name not in names:
            raise UserError(f"system {self.system['name']}: `model` must be one of {names}, got {name!r}")
        return self.models[names.index(name)]

    def unknown_fields(self, known: set[str]) -> None:
        """Reject misspelled system fields instead of silently ignoring them."""
        extra = sorted(set(self.system) - known - {"name"})
        if extra:
            raise UserError(f"system {self.system['name']}: unknown field(s) {extra}; known: {sorted(known)}")
