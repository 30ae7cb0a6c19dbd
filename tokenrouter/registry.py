"""One registry type for every pluggable kind: routing algorithms, engines, serving systems, workload loaders.

Why one: each kind used to be looked up its own way, and only two could come from outside the package. Here a
name resolves, in this order, to
  1. an object registered in code (`Registry.register`, e.g. `@tokenrouter.api.register`),
  2. a built-in: name -> "module:attr", imported on first use (importing a registry imports nothing),
  3. an installed distribution's entry point in the kind's group (`tokenrouter.algorithms`, `tokenrouter.engines`,
     `tokenrouter.systems`, `tokenrouter.workloads`),
  4. `package.module:Object`, or `package.module` when that module registers the name (its last part too),
     importable from the working directory (tokenrouter/plugins.py).
An unknown name is one line (did you mean, the valid names, the dotted form); `entries()` says where each
installed name comes from (`tokenrouter ls`). The core's two kinds live here, below everything that uses them
(config validates engine names, api registers algorithms); systems and workloads are the harness's
(tokenrouter/evals/systems.py, tokenrouter/evals/workloads.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokenrouter import plugins
from tokenrouter.errors import UserError, did_you_mean

BUILT_IN = "built-in"


@dataclass(frozen=True)
class Entry:
    """One installed name of a kind, and where it comes from (`tokenrouter ls`)."""

    name: str
    kind: str  # the registry's kind, e.g. "system"
    source: str  # "built-in", "entry point (dist 1.0)", "registered in code"
    target: str  # what it resolves to: "module:attr", or the registered object's module


class Registry:
    """The names of one kind. `builtins` is kept by reference: adding a built-in is one line in its mapping."""

    def __init__(self, kind: str, group: str, builtins: Mapping[str, str], *, base: str | None = None,
                 dotted: str = "package.module:Object") -> None:
        self.kind = kind  # how messages name it: "routing algorithm", "engine", "system", "workload loader"
        self.group = group  # the entry-point group installed distributions register under
        self.builtins = builtins  # name -> "module:attr"
        self.base = base  # "module:Class" every object must subclass (None: any callable)
        self.dotted = dotted  # the dotted form, as the unknown-name message offers it
        self._objects: dict[str, Any] = {}  # registered in code, and names already resolved
        self._registered: dict[str, Any] = {}  # registered in code only (for entries())

    def register(self, name: str, obj: Any) -> Any:
        """Make `obj` reachable as `name` in this process (a decorator's body); returns `obj`."""
        self._objects[name] = obj
        self._registered[name] = obj
        return obj

    def get(self, name: str) -> Any:
        """The object `name` resolves to (see the module docstring for the order); one UserError line if none."""
        if name in self._objects:
            return self._objects[name]
        what = f"{self.kind} {name!r}"
        if name in self.builtins:
            obj = plugins.import_object(self.builtins[name], what)
        elif ":" in name:
            obj = plugins.import_object(name, what)
        elif (found := plugins.entry_point(self.group, name)) is not None:
            obj = found
        elif "." in name:
            plugins.import_module(name, what)
            obj = self._objects.get(name, self._objects.get(name.rsplit(".", 1)[-1]))
            if obj is None:
                raise UserError(f"module for {what} registers no {self.kind} of that name "
                                f"(or name the object: {self.dotted})")
        else:
            raise self.unknown(name)
        self._objects[name] = self._checked(name, obj)
        return obj

    def require(self, name: str) -> None:
        """Refuse a name that cannot resolve, without importing anything (built-in, registered, dotted or an
        entry point's name pass; a dotted one is checked when it is used)."""
        if name in self.builtins or name in self._objects or ":" in name or "." in name:
            return
        if name not in plugins.entry_point_names(self.group):
            raise self.unknown(name)

    def names(self) -> list[str]:
        """Every name installed now: built-ins, then entry points and names registered in code, sorted."""
        extra = set(plugins.entry_point_names(self.group)) | set(self._registered)
        return [*sorted(self.builtins), *sorted(extra - set(self.builtins))]

    def unknown(self, name: str) -> UserError:
        """The one-line answer to a name that is not installed."""
        names = self.names()
        return UserError(f"unknown {self.kind} {name!r}{did_you_mean(name, names)}; known: {', '.join(names)}; "
                         f"or give {self.dotted} (`tokenrouter ls` lists what is installed)")

    def entries(self) -> list[Entry]:
        """Every installed name with where it comes from: built-ins, entry points (a built-in's name taken by an
        entry point too is listed as shadowed: the built-in wins), then names registered in code."""
        out = [Entry(n, self.kind, BUILT_IN, t) for n, t in sorted(self.builtins.items())]
        seen = set(self.builtins)
        for ep in sorted(plugins.entry_points_of(self.group), key=lambda e: e.name):
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "unknown distribution"
            shadowed = ", shadowed by the built-in" if ep.name in self.builtins else ""
            out.append(Entry(ep.name, self.kind, f"entry point ({dist}{shadowed})", ep.value))
            seen.add(ep.name)
        for name, obj in sorted(self._registered.items()):
            if name not in seen:
                out.append(Entry(name, self.kind, "registered in code", getattr(obj, "__module__", "?")))
        return out

    def _checked(self, name: str, obj: Any) -> Any:
        if self.base is None:
            if not callable(obj):
                raise UserError(f"{self.kind} {name!r}: {obj!r} is not callable")
            return obj
        module, _, cls_name = self.base.partition(":")
        base = plugins.import_object(self.base, f"{self.kind} {name!r}")
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise UserError(f"{self.kind} {name!r}: {obj!r} is not a {cls_name} subclass ({module})")
        return obj


# The core's kinds. Built-ins are "module:attr" strings: nothing here imports an engine or an algorithm.
ALGORITHMS = Registry("routing algorithm", "tokenrouter.algorithms", {
    "bernoulli": "tokenrouter.algorithms.bernoulli:Bernoulli",
    "citer": "tokenrouter.algorithms.citer:Citer",
    "co_llm": "tokenrouter.algorithms.co_llm:CoLLM",
    "ensemble": "tokenrouter.algorithms.ensemble:Ensemble",
    "r2r": "tokenrouter.algorithms.r2r:R2R",
    "rstitch": "tokenrouter.algorithms.rstitch:RStitch",
    "stay": "tokenrouter.algorithms.stay:Stay",
}, base="tokenrouter.api:RoutingAlgorithm", dotted="package.module:Class")

# An engine is an Engine subclass with `from_spec(spec: ModelSpec)`; tokenrouter/engine/factory.py builds it
# (in the subserver, lock-step's driver, a remote engine host). torch and sglang with tp > 1 run as TP groups.
ENGINES = Registry("engine", "tokenrouter.engines", {
    "torch": "tokenrouter.engine.torch_engine:TorchEngine",
    "sim": "tokenrouter.engine.sim:SimEngine",
    "sglang": "tokenrouter.engine.sglang_engine:SGLangEngine",
}, base="tokenrouter.engine.base:Engine", dotted="package.module:Class")
