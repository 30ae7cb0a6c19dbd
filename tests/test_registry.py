"""One registry type for algorithms, engines, systems and workload loaders (tokenrouter/registry.py): built-ins
imported on first use, entry points of installed distributions, dotted paths, names registered in code; one
error line for a name that is not installed; where each name comes from."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.distributions import fake_distribution
from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError
from tokenrouter.evals.systems import REGISTRY as SYSTEMS
from tokenrouter.evals.systems import SYSTEMS as SYSTEM_BUILTINS
from tokenrouter.evals.workloads import LOADER_REGISTRY as WORKLOADS
from tokenrouter.registry import ALGORITHMS, BUILT_IN, ENGINES, Registry

ALL = {"algorithms": ALGORITHMS, "engines": ENGINES, "systems": SYSTEMS, "workloads": WORKLOADS}


def fresh(registry: Registry) -> Registry:
    """A registry like `registry` with nothing resolved or registered yet (the shared ones keep what they load)."""
    return Registry(registry.kind, registry.group, registry.builtins, base=registry.base, dotted=registry.dotted)


def test_every_public_name_of_every_kind_is_built_in() -> None:
    assert set(ALGORITHMS.builtins) == {"bernoulli", "citer", "co_llm", "ensemble", "r2r", "rstitch", "stay"}
    assert set(ENGINES.builtins) == {"torch", "sim", "sglang"}
    assert {"tokenrouter", "lockstep", "std_serving", "official_r2r", "query_routing", "single"} <= set(SYSTEMS.builtins)
    assert set(WORKLOADS.builtins) == {"math", "choice", "agentic", "synthetic", "arith"}
    assert SYSTEMS.builtins is SYSTEM_BUILTINS  # one line in tokenrouter/evals/systems.py SYSTEMS adds a built-in system


def test_importing_a_registry_imports_nothing_it_names() -> None:
    """Built-ins are "module:attr" strings: the registry (and the config, which checks engine names) import no
    engine, algorithm, torch or harness module."""
    code = ("import sys, tokenrouter.registry, tokenrouter.config; "
            "print(sorted(m for m in sys.modules if m.startswith(('tokenrouter', 'torch'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == str(["tokenrouter", "tokenrouter.config", "tokenrouter.errors",
                                       "tokenrouter.plugins", "tokenrouter.registry"])


@pytest.mark.parametrize("kind", sorted(ALL))
def test_every_built_in_resolves_and_keeps_the_contract(kind: str) -> None:
    registry = ALL[kind]
    for name, target in registry.builtins.items():
        obj = registry.get(name)
        assert f"{obj.__module__}:{obj.__name__}" == target
    assert [e.source for e in registry.entries()][: len(registry.builtins)] == [BUILT_IN] * len(registry.builtins)


@pytest.mark.parametrize(("kind", "typo", "expected"), [
    ("algorithms", "bernouli", "unknown routing algorithm 'bernouli' (did you mean 'bernoulli'?); known: bernoulli, "
                               "citer, co_llm, ensemble, r2r, rstitch, stay; or give package.module:Class"),
    ("engines", "simm", "unknown engine 'simm' (did you mean 'sim'?); known: sglang, sim, torch; or give "
                        "package.module:Class"),
    ("systems", "lokstep", "unknown system 'lokstep' (did you mean 'lockstep'?); known: lockstep, official_ensemble, official_r2r,"),
    ("workloads", "synthetik", "unknown workload loader 'synthetik' (did you mean 'synthetic'?); known: agentic,"),
])
def test_an_unknown_name_is_one_line_with_the_nearest_and_the_known(kind: str, typo: str, expected: str) -> None:
    with pytest.raises(UserError) as err:
        fresh(ALL[kind]).get(typo)  # the shared one lists what other tests registered in this process too
    message = str(err.value)
    assert message.startswith(expected) and "\n" not in message, message
    assert message.endswith("(`tokenrouter ls` lists what is installed)")


def test_far_off_names_get_no_guess_and_the_errors_of_each_kind_name_their_field() -> None:
    with pytest.raises(UserError, match=r"^unknown system 'xyzzy'; known: "):
        SYSTEMS.get("xyzzy")
    with pytest.raises(UserError, match=r"^model 'm': unknown engine 'gpu'; known: sglang, sim, torch; "):
        ModelSpec(name="m", engine="gpu")
    from tokenrouter.evals.workloads import loader_function

    with pytest.raises(UserError, match=r"^workload w: unknown workload loader 'nope'"):
        loader_function("w", "nope")
    from tokenrouter.algorithms import build_algorithm

    with pytest.raises(UserError, match=r"^unknown routing algorithm 'nope'"):
        build_algorithm("nope", 0, ["a", "b"], {})


def test_dotted_paths_and_what_they_must_be() -> None:
    assert ALGORITHMS.get("tokenrouter.algorithms.stay:Stay").name == "stay"
    assert SYSTEMS.get("tokenrouter.evals.systems:tokenrouter_system").__name__ == "tokenrouter_system"
    with pytest.raises(UserError, match=r"routing algorithm 'os:getcwd': .* is not a RoutingAlgorithm subclass \(tokenrouter.api\)"):
        ALGORITHMS.get("os:getcwd")
    with pytest.raises(UserError, match=r"engine 'os:sep': '/' is not a Engine subclass \(tokenrouter.engine.base\)"):
        ENGINES.get("os:sep")
    with pytest.raises(UserError, match=r"system 'os:sep': '/' is not callable"):
        SYSTEMS.get("os:sep")
    with pytest.raises(UserError, match=r"workload loader 'nowhere:f': no module 'nowhere'"):
        WORKLOADS.get("nowhere:f")
    with pytest.raises(UserError, match=r"module for system 'json.decoder' registers no system of that name"):
        fresh(SYSTEMS).get("json.decoder")


def test_names_registered_in_code_resolve_by_their_name_and_their_module(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    package = f"own_systems_{uuid.uuid4().hex[:8]}"
    systems = fresh(SYSTEMS)
    monkeypatch.setattr("tokenrouter.evals.systems.REGISTRY", systems)
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "mine.py").write_text("from tokenrouter.evals.systems import REGISTRY\n\n"
                                                "def mine(setup):\n    return setup\n\n"
                                                "REGISTRY.register('mine', mine)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert systems.get(f"{package}.mine").__name__ == "mine"  # a dotted module registering its last name
    assert systems.get("mine").__name__ == "mine"
    assert [(e.name, e.source, e.target) for e in systems.entries()][-1] == ("mine", "registered in code",
                                                                             f"{package}.mine")


def test_entry_points_of_every_kind_are_found_listed_and_loaded(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution on sys.path declaring one name per group (and one taking a built-in's name): each is
    listed with the distribution it comes from and resolves; the built-in keeps its name."""
    module = f"outside_{uuid.uuid4().hex[:8]}"
    site = fake_distribution(tmp_path / "site", "outside-kinds", "1.2", {
        "tokenrouter.algorithms": {"always_large": f"{module}:AlwaysLarge"},
        "tokenrouter.engines": {"quiet_sim": f"{module}:QuietSim", "sim": f"{module}:QuietSim"},
        "tokenrouter.systems": {"mine": f"{module}:mine"},
        "tokenrouter.workloads": {"nothing": f"{module}:load_nothing"},
    }, {f"{module}.py": (
        "from tokenrouter.api import RoutingAlgorithm\n"
        "from tokenrouter.engine.sim import SimEngine\n\n"
        "class AlwaysLarge(RoutingAlgorithm):\n    name = 'always_large'\n\n"
        "    def route(self, step):\n        return [self.num_models - 1] * len(step)\n\n"
        "class QuietSim(SimEngine):\n    pass\n\n"
        "def mine(setup):\n    return None\n\n"
        "def load_nothing(cfg, seed):\n    return None\n")})
    monkeypatch.syspath_prepend(str(site))
    where = "entry point (outside-kinds 1.2)"
    for registry, name, cls in ((ALGORITHMS, "always_large", "AlwaysLarge"), (ENGINES, "quiet_sim", "QuietSim"),
                                (SYSTEMS, "mine", "mine"), (WORKLOADS, "nothing", "load_nothing")):
        registry = fresh(registry)
        assert (name, where, f"{module}:{cls}") in [(e.name, e.source, e.target) for e in registry.entries()]
        assert name in registry.names() and registry.get(name).__name__ == cls
    engines = fresh(ENGINES)
    assert ("sim", f"{where[:-1]}, shadowed by the built-in)") in [(e.name, e.source) for e in engines.entries()]
    assert engines.get("sim").__name__ == "SimEngine"  # the built-in wins
    ModelSpec(name="m", engine="quiet_sim", source="x")  # an installed engine's name is valid config
    with pytest.raises(UserError, match="known: sglang, sim, torch, quiet_sim;"):
        ModelSpec(name="m", engine="quiet_simm", source="x")


def test_a_broken_or_ambiguous_entry_point_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = fake_distribution(tmp_path / "a", "one", "1", {"tokenrouter.systems": {"twice": "json:dumps",
                                                                                  "broken": "nowhere_at_all:x"}})
    fake_distribution(site, "two", "1", {"tokenrouter.systems": {"twice": "json:loads"}})
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(UserError, match=r"'twice' is registered by several installed packages: \['json:dumps', 'json:loads'\]"):
        fresh(SYSTEMS).get("twice")
    with pytest.raises(UserError, match=r"entry point 'broken' \(nowhere_at_all:x\) failed to load: ModuleNotFoundError"):
        fresh(SYSTEMS).get("broken")
