"""`system=single system.model=NAME`: one model of the set on its own (LLM-only / SLM-only baselines).

Why through the TokenRouter runtime with the `stay` algorithm: the same scheduler, engine and timing code as
the routed runs, so the comparison measures routing, not a different server.
"""

from __future__ import annotations

from dataclasses import replace

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.system import FRONTEND_SEED, ServingSystem, SystemSetup


def single_model_system(spec: ModelSpec, runtime: RuntimeConfig) -> ServingSystem:
    """A TokenRouter front end over one model whose requests never leave it."""
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    # Thresholds configured for the routed model set do not apply to one model: batch whatever is ready.
    runtime = replace(runtime, thresholds="auto" if runtime.thresholds == "auto" else [1])
    return TokenRouterFrontend([spec], AlgorithmSpec("stay"), runtime, seed=FRONTEND_SEED)


def from_setup(setup: SystemSetup) -> ServingSystem:
    setup.unknown_fields({"model"})
    return single_model_system(setup.model(setup.system.get("model")), setup.runtime)
