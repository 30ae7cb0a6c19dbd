"""Config keys nothing reads, refused in one line with a "did you mean" (`bench` and `serve` alike).

Hydra refuses `concurency=4` (no such key) and advises `+concurency=4`, which it then accepts: the run goes on
at the default concurrency without a word. Keys under `runtime`, `sampling`, `slo`, `algorithm` and `system`
are checked where they are read; this module covers the rest: top-level keys, `server.*` and the model set's
own keys (a fixed schema: refused), and `workload.*` (a loader of the user's own may read a key its config
lacks: warned). Hydra's advice itself is replaced by the same answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from tokenrouter.errors import UserError, did_you_mean

log = logging.getLogger(__name__)

# top-level keys some part of tokenrouter reads, beyond those conf/config.yaml sets: optional ones, and those
# experiment configs set for their own interpolations or labels
OPTIONAL_TOP_LEVEL = ("sampling", "experiment_name", "ablation_variant", "variant", "point", "demo", "tp_layout",
                      "layouts")
CHECKED_WHERE_READ = ("runtime", "sampling", "slo", "algorithm", "system", "hydra")
MODEL_SET_KEYS = ("name", "members", "engine", "routers")


def check_added_keys(overrides: Iterable[str], cfg: Any, is_group: Callable[[str], bool]) -> None:
    """Refuse (UserError) a `+key=value` / `++key=value` override that adds a key nothing reads; warn for an
    added `workload.*` key. `cfg` is the composed config, `is_group(name)` says whether a name is a config
    group (`+experiment=table3` selects a config, it adds no key)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    added = [o for o in OverridesParser.create().parse_overrides(list(overrides)) if o.is_add() or o.is_force_add()]
    # a top-level key a `+` adds was not in the composed config before it (Hydra refuses `+seed=1`)
    known_top = set(OPTIONAL_TOP_LEVEL) | ({str(k) for k in cfg} - {o.key_or_group for o in added} - {"hydra"})
    for override in added:
        key = override.key_or_group
        parts = key.split(".")
        if is_group(key.replace(".", "/")) or parts[0] in CHECKED_WHERE_READ:
            continue
        if len(parts) == 1 and key not in OPTIONAL_TOP_LEVEL:
            raise UserError(unknown_key(key, sorted(known_top)))
        if parts[0] == "server" and len(parts) > 1:
            raise UserError(unknown_key(key, [f"server.{k}" for k in _keys(cfg, "server", key)]))
        if parts[0] == "models" and len(parts) == 2 and parts[1] not in MODEL_SET_KEYS:
            raise UserError(unknown_key(key, [f"models.{k}" for k in MODEL_SET_KEYS]))
        if parts[0] == "workload" and len(parts) > 1 and override.is_add():  # `++`: set, whether there or not
            log.warning("+%s: workload %s's config has no such key; only a loader of your own reads it",
                        key, _name(cfg, "workload"))


def check_sweep_keys(hydra: Any, jobs: list[list[str]]) -> None:
    """`check_added_keys` for a command that plans or rehearses a sweep without launching it (`plan`,
    `rehearse`): its first job composed as `bench` would compose it (every job shares the keys it adds)."""
    from hydra.types import RunMode

    if jobs:
        cfg = hydra.compose_config("config", jobs[0], run_mode=RunMode.RUN)
        check_added_keys(jobs[0], cfg, hydra.config_loader.repository.group_exists)


def hydra_error(hydra: Any, message: str, overrides: list[str]) -> str:
    """A Hydra composition error as one line, an unknown key answered as `bench` answers it."""
    from hydra.types import RunMode

    return explain_missing_key(message, overrides,
                               lambda rest: hydra.compose_config("config", rest, run_mode=RunMode.RUN))


def unknown_key(key: str, known: Iterable[str]) -> str:
    """`unknown config key 'concurency' (did you mean 'concurrency'?)`."""
    return f"unknown config key {key!r}{did_you_mean(key, known, cutoff=0.8)}; nothing reads it (`tokenrouter bench --cfg job` lists the keys)"


HYDRA_MISSING_KEY = re.compile(r"Could not override '([^']+)'")


def explain_missing_key(message: str, overrides: list[str], compose: Callable[[list[str]], Any]) -> str:
    """Hydra's "Could not override 'X'. To append to your config use +X=..." as our answer (the key is
    unknown, with the nearest known key of the config composed without it), since following Hydra's advice
    would run with the key ignored."""
    from omegaconf import OmegaConf

    match = HYDRA_MISSING_KEY.search(message)
    if match is None:
        return message
    key = match.group(1)
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        known = _dotted_keys(OmegaConf.to_container(compose(rest), resolve=False))
    except Exception:  # noqa: BLE001 - another override is bad too: no suggestion, the key is still unknown
        known = []
    return unknown_key(key, known)


def _keys(cfg: Any, node: str, added: str) -> list[str]:
    value = cfg.get(node)
    return [str(k) for k in value if f"{node}.{k}" != added] if hasattr(value, "keys") else []


def _name(cfg: Any, node: str) -> str:
    value = cfg.get(node)
    return str(value.get("name")) if hasattr(value, "get") else node


def _dotted_keys(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a config as plain data, as `a.b.c` (lists not entered; Hydra's own node left out)."""
    out = []
    for key, value in data.items():
        if key == "hydra":
            continue
        out.append(f"{prefix}{key}")
        if isinstance(value, dict):
            out += _dotted_keys(value, f"{prefix}{key}.")
    return out


def algorithm_by_name(overrides: list[str]) -> list[str]:
    """`algorithm.name=pkg:Class` (or an entry point's name) without an `algorithm=` group: the named algorithm
    with the parameters given beside it only, as `algorithm=stay algorithm.name=... +algorithm.K=V` gives it
    (the default group's parameters, e.g. bernoulli's route_prob, would otherwise reach a class without them;
    deleting them, `~algorithm.route_prob`, is then needless and dropped)."""
    keys = [o.split("=", 1)[0] for o in overrides]
    if "algorithm.name" not in keys or any(k.lstrip("+~") == "algorithm" for k in keys):
        return list(overrides)
    out = ["algorithm=stay"]
    for override, key in zip(overrides, keys, strict=True):
        bare = key.lstrip("+~")
        if not bare.startswith("algorithm.") or bare == "algorithm.name":
            out.append(override)
        elif not key.startswith("~"):
            out.append("+" + override.lstrip("+"))
    return out
