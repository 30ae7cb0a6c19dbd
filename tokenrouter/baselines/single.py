"""`system=single system.model=NAME`: one model of the set on its own (LLM-only / SLM-only baselines).

Why through the TokenRouter runtime with the `stay` algorithm by default: the same scheduler, engine and
timing code as the routed runs, so the comparison measures routing, not a different server. `server: sglang`
runs the model on a real SGLang server instead (tokenrouter/baselines/http_model.py), the system the paper compared with.
"""

from __future__ import annotations

from dataclasses import replace

from tokenrouter.baselines.http_model import HttpModelSystem
from tokenrouter.baselines.model_servers import KINDS
from tokenrouter.baselines.sglang_server import SGLangServerOptions
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.errors import UserError
from tokenrouter.system import FRONTEND_SEED, ServingSystem, SystemSetup


def single_model_system(spec: ModelSpec, runtime: RuntimeConfig) -> ServingSystem:
    """A TokenRouter front end over one model whose requests never leave it."""
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    # Thresholds configured for the routed model set do not apply to one model: batch whatever is ready.
    runtime = replace(runtime, thresholds="auto" if runtime.thresholds == "auto" else [1])
    return TokenRouterFrontend([spec], AlgorithmSpec("stay"), runtime, seed=FRONTEND_SEED)


def model_system(spec: ModelSpec, runtime: RuntimeConfig, seed: int, server: str = "tokenrouter",
                 sglang: SGLangServerOptions | None = None) -> ServingSystem:
    """One model served whole: on our runtime (`tokenrouter`) or on a real SGLang server (`sglang`)."""
    if server not in KINDS:
        raise UserError(f"system: server must be one of {KINDS}, got {server!r}")
    if server == "sglang":
        return HttpModelSystem(spec, runtime, seed, "sglang", sglang)
    return single_model_system(spec, runtime)


def server_options(setup: SystemSetup) -> tuple[str, SGLangServerOptions]:
    """The `server` and `sglang` fields of a system that serves whole queries."""
    name = setup.system["name"]
    return (str(setup.system.get("server", "tokenrouter")),
            SGLangServerOptions.from_dict(setup.system.get("sglang"), f"system {name}"))


def from_setup(setup: SystemSetup) -> ServingSystem:
    setup.unknown_fields({"model", "server", "sglang"})
    server, sglang = server_options(setup)
    return model_system(setup.model(setup.system.get("model")), setup.runtime, setup.seed, server, sglang)
