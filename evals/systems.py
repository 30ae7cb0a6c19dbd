"""The serving systems a benchmark run can drive, behind one protocol, picked by `system.name`.

Every system (TokenRouter itself and each baseline) takes the same `GenerationRequest`s and returns the same
`GenerationResult`s, so the runner, `requests.jsonl` and the reports never special-case a system.
Optional hooks the runner uses when a system has them:
- `calibrate(requests, texts)`: sees the whole workload before the first request (query-level routing sets
  its threshold from the prompts' scores; TokenRouter sets `runtime.auto_context_tokens` to its mean context);
- `summary_extra() -> dict`: extra summary.json fields (RouteLLM's APGR / CPT);
- `thresholds(N) -> list[int]`: the delayed-batching thresholds at N active requests (recorded, and used for
  the throughput model's prediction).
Per-request failures are results with finish_reason "error" or a raised `UserError`; any other exception
from `generate` means the system itself failed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, model_specs, seed_value
from tokenrouter.errors import UserError
from tokenrouter.results import GenerationRequest, GenerationResult


@runtime_checkable
class ServingSystem(Protocol):
    model_names: list[str]

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def generate(self, req: GenerationRequest) -> GenerationResult: ...

    def stats(self) -> dict: ...


# The runner folds the experiment seed into every request's seed (evals.bench.request_seed), identically for
# every system; a TokenRouter front end would shift request seeds again by its own seed, so it gets 0.
FRONTEND_SEED = 0


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


def plain(value: Any) -> Any:
    """An OmegaConf node as plain Python data (other values unchanged)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


# system name -> "module:function" taking a SystemSetup (imported lazily: baselines pull optional packages)
SYSTEMS: dict[str, str] = {
    "tokenrouter": "evals.systems:tokenrouter_system",
    "lockstep": "baselines.lockstep:from_setup",
    "std_serving": "baselines.std_serving:from_setup",
    "query_routing": "baselines.query_routing:from_setup",
    "single": "baselines.single:from_setup",
    "official_r2r": "baselines.official_r2r:from_setup",
}


def tokenrouter_system(setup: SystemSetup) -> ServingSystem:
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    setup.unknown_fields(set())
    return TokenRouterFrontend(setup.models, setup.algorithm, setup.runtime, seed=FRONTEND_SEED)


def build_system(cfg: Any) -> ServingSystem:
    """The serving system `cfg.system.name` asks for, built (not started) from the experiment config."""
    setup = SystemSetup.from_config(cfg)
    name = setup.system["name"]
    if name not in SYSTEMS:
        raise UserError(f"unknown system {name!r}; known: {sorted(SYSTEMS)}")
    module, _, func = SYSTEMS[name].partition(":")
    try:
        factory = getattr(importlib.import_module(module), func)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise UserError(f"system {name!r} is not available yet (no module {module})") from None
        raise
    return factory(setup)
