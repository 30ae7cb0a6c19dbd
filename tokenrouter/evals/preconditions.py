"""What must hold for a job to start, decided from its config alone: `plan` and `rehearse` refuse the same jobs.

Why: each of these was found on a job that `plan` called fit and that would have stopped at start on the GPU
node (a learned algorithm with no router, an R2R router beside a vocabulary sharded over TP ranks, an engine or
baseline whose package this Python environment lacks, a GPU this machine does not have). They are pure functions of the composed
config (and of what is importable here), so they cost nothing and run before anything is built.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from tokenrouter.config import ModelSpec, model_specs, plain
from tokenrouter.errors import UserError

# .venv-sglang is the GPU node's one environment (`.[node]`: SGLang, RouteLLM, the Hydra launchers and sweeper)
NODE_HOW = "make sglang-venv, the one environment for every shipped experiment, then run from .venv-sglang"
# algorithms whose router reads the entry model's input embedding (R2R embeds the predicted token)
EMBEDDING_ROUTERS = ("r2r",)
# algorithms that route by a trained router network, which the job must name
ROUTED_BY_A_NETWORK = ("r2r", "citer", "co_llm")
OWN_ROUTING = ("single", "official_r2r", "query_routing")  # systems that never build the algorithm's router
OWN_ENGINES = ("official_r2r",)  # systems whose server runs the models itself, in its own environment


def start_problems(cfg: Any, here: bool = True) -> list[str]:
    """Why the job `cfg` (a composed experiment config) cannot start, one line each; empty when it can. `here`:
    it would start on this machine, so this Python environment's packages count (not for a node described by
    `plan --gpus`: see `missing_packages`)."""
    specs = model_specs(cfg.models)
    system = str(cfg.system.name)
    found = [_router_named(cfg, system), _sharded_embedding(cfg, specs)]
    return [p for p in (*found, *((missing_devices(specs) + missing_packages(cfg)) if here else [])) if p]


def missing_devices(specs: list[ModelSpec]) -> list[str]:
    """A GPU a model (or one of its TP ranks) is placed on that this machine does not have: said before any
    download or Hub lookup starts (they would retry for a minute first)."""
    from tokenrouter.engine.placement import rank_device

    wanted = [(s.name, rank_device(s, r)) for s in specs if s.device.startswith("cuda") for r in range(s.tp)]
    if not wanted:
        return []
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for name, device in wanted:
        if (int(device.split(":")[1]) if ":" in device else 0) >= count:
            return [f"model {name!r} is placed on {device}, which this machine does not have ({count} CUDA "
                    "device(s)): run it on a GPU node (check the node from here with `tokenrouter plan --gpus N "
                    "--gpu-memory-gib G`, run it here on stand-ins with `tokenrouter rehearse`)"]
    return []


def _router_named(cfg: Any, system: str) -> str | None:
    name = str(cfg.algorithm.get("name"))
    if name in ROUTED_BY_A_NETWORK and not cfg.algorithm.get("router") and system not in OWN_ROUTING:
        return (f"algorithm {name} routes by a trained router and none is named: set algorithm.router=PATH "
                f"(`tokenrouter train-router --algorithm {name}`) or the model set's routers.{name}")
    return None


def _sharded_embedding(cfg: Any, specs: list[ModelSpec]) -> str | None:
    entry = specs[0]
    if str(cfg.algorithm.get("name")) in EMBEDDING_ROUTERS and entry.engine == "sglang" and entry.tp > 1:
        return (f"algorithm {cfg.algorithm.name}'s router reads model {entry.name!r}'s input embedding, which the "
                f"sglang engine at tp={entry.tp} shards over its ranks: give {entry.name!r} tp=1")
    return None


# module a job may need -> the extra of this project that installs it (all of them are in `.[node]`)
EXTRAS = {"sglang": "sglang", "routellm": "routellm"}


def missing_packages(cfg: Any) -> list[str]:
    """What the job needs installed that this Python environment lacks, one line each."""
    specs = model_specs(cfg.models)
    system = str(cfg.system.name)
    needs = []
    if system not in OWN_ENGINES and any(s.engine == "sglang" for s in specs):
        needs.append(("sglang", "engine sglang"))
    if system.startswith("query_routing"):
        needs.append(("routellm", f"system {system}"))
    missing = {}
    for module, what in needs:
        if importlib.util.find_spec(module) is None:
            how = f"pip install '.[{EXTRAS[module]}]', or {NODE_HOW}"
            missing.setdefault(module, f"{what} needs {module}, which this Python environment lacks ({how})")
    servers = _sglang_servers(cfg, system)
    return [*missing.values(), *([servers] if servers else [])]


def _sglang_servers(cfg: Any, system: str) -> str | None:
    """SGLang servers run from an interpreter of their own (`system.sglang.python`: .venv-sglang,
    $TOKENROUTER_SGLANG_PYTHON, or this one if it has sglang): one must exist, whether or not this environment
    can import sglang."""
    if not (system.endswith("_sglang") or cfg.system.get("server") == "sglang"):
        return None
    from tokenrouter.baselines.sglang_server import SGLangServerOptions, sglang_python

    try:
        sglang_python(SGLangServerOptions.from_dict(plain(cfg.system.get("sglang")), f"system {system}").python)
    except UserError as exc:
        return f"system {system} (SGLang servers): {exc}"
    return None
