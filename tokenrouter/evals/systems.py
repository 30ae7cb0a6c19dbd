"""The serving systems a benchmark run can drive (`tokenrouter.system.ServingSystem`), picked by `system.name`:
a built-in below, an installed entry point in the `tokenrouter.systems` group, or `package.module:function`
(tokenrouter/registry.py). A system is a function (or class) taking a `SystemSetup` and returning a
ServingSystem; a baseline of your own is a package with that entry point and a config dir holding
`system/<name>.yaml` (`tokenrouter bench --config-dir ... system=<name>`).

The contract itself (ServingSystem, SystemSetup, FRONTEND_SEED) lives in the core so that baselines need only
the core; it is importable from here too, where scripts written against the harness look for it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from tokenrouter.config import RuntimeConfig
from tokenrouter.errors import UserError
from tokenrouter.registry import Registry
from tokenrouter.system import FRONTEND_SEED, ServingSystem, SystemSetup

# system name -> "module:function" taking a SystemSetup (imported lazily: baselines pull optional packages)
SYSTEMS: dict[str, str] = {
    "tokenrouter": "tokenrouter.evals.systems:tokenrouter_system",
    "lockstep": "tokenrouter.baselines.lockstep:from_setup",
    "std_serving": "tokenrouter.baselines.std_serving:from_setup",
    "query_routing": "tokenrouter.baselines.query_routing:from_setup",
    "single": "tokenrouter.baselines.single:from_setup",
    "official_r2r": "tokenrouter.baselines.official_r2r:from_setup",
    "official_ensemble": "tokenrouter.baselines.official_ensemble:from_setup",
}
REGISTRY = Registry("system", "tokenrouter.systems", SYSTEMS, dotted="package.module:function")

# system name -> the config keys it never reads (a key, or a prefix ending in "."), so reports pair one of its
# runs with a rival's whatever the rival's value there (tokenrouter.evals.comparable.place): one lock-step run is the
# baseline of TokenRouter runs at every runtime.max_wait_ms. Lock-step is one in-process driver with no delayed
# batching, subserver links or spinning: of `runtime` it reads the batch and step-token caps, the trace
# switches and the plugin guard's bounds (route() budget, hand-offs per committed token); official R2R runs
# thu-nics/R2R's own server. Checked against what each system reads by tests/evals/test_systems.py.
LOCKSTEP_READS = ("max_batch_size", "max_step_tokens", "trace", "trace_max_batches", "route_timeout_s",
                  "max_handoffs_per_token")
UNREAD_KEYS: dict[str, tuple[str, ...]] = {
    "lockstep": tuple(f"runtime.{f.name}" for f in fields(RuntimeConfig) if f.name not in LOCKSTEP_READS),
    "official_r2r": ("runtime.",),
    "official_ensemble": ("runtime.",),
}


def reads(system: object, key: str) -> bool:
    """Whether runs of `system` read config `key` (e.g. "runtime.max_wait_ms"); unknown systems read all."""
    unread = UNREAD_KEYS.get(system, ()) if isinstance(system, str) else ()
    return not any(key == u or (u.endswith(".") and key.startswith(u)) for u in unread)


def tokenrouter_system(setup: SystemSetup) -> ServingSystem:
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    setup.unknown_fields(set())
    return TokenRouterFrontend(setup.models, setup.algorithm, setup.runtime, seed=FRONTEND_SEED)


def build_system(cfg: Any) -> ServingSystem:
    """The serving system `cfg.system.name` asks for, built (not started) from the experiment config."""
    setup = SystemSetup.from_config(cfg)
    name = setup.system["name"]
    system = REGISTRY.get(name)(setup)
    if not isinstance(system, ServingSystem):  # a factory that forgot the contract (outside code too): one line
        raise UserError(f"system {name!r} returned a {type(system).__name__}, not a tokenrouter.system.ServingSystem")
    return system
