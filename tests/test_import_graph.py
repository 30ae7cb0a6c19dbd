"""The project's imports run one way and never in a circle, checked statically (every module parsed with
`ast`, nothing imported, so optional packages and lazy imports inside functions count too).

Everything lives under the one import name `tokenrouter` (the wheel installs nothing else, so no other
distribution's `evals` or `baselines` is overwritten). Layers, lowest first; a module may import its own layer
and those below, never one above:
  0 core       `tokenrouter` minus `tokenrouter.cli`, `tokenrouter.evals` and `tokenrouter.baselines`: api,
               config, engines, runtime, the HTTP server, algorithms, perfmodel, models, the serving-system
               contract (`tokenrouter.system`) and the arith task
  1 baselines  `tokenrouter.baselines`: the systems TokenRouter is compared against, built on the core alone
  2 evals      `tokenrouter.evals`: workloads, metrics, the system registry and the runner, result store, reports
  3 app        `tokenrouter.cli` and `tokenrouter.__main__`: the `tokenrouter` command, which drives the
               harness (bench, report, demo) and so sits on top of it
  4 scripts    `tests`, `benchmarks`: never imported by the layers above (not scanned themselves)
The core is what a user of the runtime installs and reads; baselines must be comparable systems on the same
core, not pieces of the harness; the harness drives both. A cycle between two modules (at any depth, lazy
or not) means neither can be understood, tested or moved without the other.

Inside the core, the same rule over its parts, lowest first (CORE_ORDER):
  registry < engine < api < perfmodel < algorithms < system < runtime < server
The registry names what it finds as "module:attr" strings and imports none of it; engines know nothing of
routing; the algorithm contract (api) knows engines, not the algorithms; the runtime sits on all of them; the
HTTP server sits on the runtime, which never imports it (the server takes its front end through the typed
interface `tokenrouter.server.frontend_api.FrontEnd`, which the runtime's front end implements structurally).
The helpers beside them (config, errors, plugins, generation, handoff, trace, ...) are not ordered here.

`python tests/test_import_graph.py [ROOT]` prints the offending edges of another checkout and exits 1.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("tokenrouter",)  # the roots scanned
SUBPACKAGE_LAYERS = {"cli": "app", "__main__": "app", "evals": "evals", "baselines": "baselines"}  # tokenrouter.<x>
FOREIGN = ("evals", "baselines")  # other distributions' top-level names: the project's old ones, never imported
LAYERS = ("core", "baselines", "evals", "app", "scripts")
CORE_ORDER = ("registry", "engine", "api", "perfmodel", "algorithms", "system", "runtime",  # tokenrouter.<part>
              "server")


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` (both dotted module names) at `path:line`."""

    source: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: {self.source} ({layer(self.source)}) imports "
                f"{self.target} ({layer(self.target)})")


def layer(module: str) -> str:
    """The layer of a dotted module name of the project."""
    parts = module.split(".")
    if parts[0] != "tokenrouter":
        return "scripts"
    return SUBPACKAGE_LAYERS.get(parts[1], "core") if len(parts) > 1 else "core"


def core_part(module: str) -> str | None:
    """The part of CORE_ORDER a core module belongs to (`tokenrouter.engine.sim` -> engine), else None."""
    parts = module.split(".")
    return parts[1] if layer(module) == "core" and len(parts) > 1 and parts[1] in CORE_ORDER else None


def is_project(module: str) -> bool:
    return module.split(".")[0] in (*PACKAGES, "tests", "benchmarks")


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under the scanned packages of checkout `root`."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def resolve(name: str, known: dict[str, Path]) -> str:
    """The deepest module of the project that the dotted `name` (a module or a name inside one) refers to."""
    parts = name.split(".")
    while len(parts) > 1 and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts)


def imports(module: str, path: Path, known: dict[str, Path], root: Path) -> list[Edge]:
    """Every project import in one file, with the module it lands in."""
    is_package = path.name == "__init__.py"
    rel = str(path.relative_to(root))
    edges: dict[tuple[str, int], Edge] = {}  # one per target per statement
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if is_project(name):
                target = resolve(name, known)
                if target != module:
                    edges.setdefault((target, node.lineno), Edge(module, target, rel, node.lineno))
    return list(edges.values())


def graph(root: Path) -> list[Edge]:
    known = modules(root)
    return [e for m, p in known.items() for e in imports(m, p, known, root)]


def upward(edges: list[Edge]) -> list[Edge]:
    return [e for e in edges if LAYERS.index(layer(e.target)) > LAYERS.index(layer(e.source))]


def against_core_order(edges: list[Edge]) -> list[Edge]:
    """Edges from a part of the core to a part above it in CORE_ORDER."""
    out = []
    for e in edges:
        source, target = core_part(e.source), core_part(e.target)
        if source and target and CORE_ORDER.index(target) > CORE_ORDER.index(source):
            out.append(e)
    return out


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component of more than one module (Tarjan)."""
    succ: dict[str, dict[str, Edge]] = {}
    for e in edges:
        succ.setdefault(e.source, {}).setdefault(e.target, e)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in succ.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return [_one_cycle(sorted(c)[0], c, succ) for c in components]


def _one_cycle(start: str, component: set[str], succ: dict[str, dict[str, Edge]]) -> list[Edge]:
    """A shortest cycle through `start` inside its component (breadth-first back to `start`)."""
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w, e in succ.get(v, {}).items():
                if w not in component:
                    continue
                if w == start:
                    path = [e]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                if w not in came:
                    came[w] = e
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a component but on no cycle")


def foreign_imports(root: Path) -> list[tuple[str, int, str]]:
    """Imports of the names the harness and the baselines had before they moved under `tokenrouter`
    (`evals`, `baselines`): where another distribution of that name is installed, such an import gets it.
    The package, the tests, the benchmarks and the docs' scripts are read."""
    out = []
    files = [p for d in (*PACKAGES, "tests", "benchmarks", "docs", "scripts") for p in sorted((root / d).rglob("*.py"))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            out += [(str(path.relative_to(root)), node.lineno, n) for n in names if n.split(".")[0] in FOREIGN]
    return out


def problems(root: Path) -> list[str]:
    """Every upward edge, every edge against the core's inner order and one cycle per tangle of checkout
    `root`, one line each."""
    edges = graph(root)
    out = [f"upward: {e}" for e in upward(edges)]
    out += [f"foreign: {path}:{line}: imports {name}, another distribution's name (this project's is "
            f"tokenrouter.{name})" for path, line, name in foreign_imports(root)]
    out += [f"core order: {e.path}:{e.line}: {e.source} ({core_part(e.source)}) imports {e.target} "
            f"({core_part(e.target)}); order: {' < '.join(CORE_ORDER)}" for e in against_core_order(edges)]
    out += ["cycle: " + " -> ".join([c[0].source, *(e.target for e in c)]) + "\n  "
            + "\n  ".join(str(e) for e in c) for c in cycles(edges)]
    return out


def test_the_graph_is_seen() -> None:
    """The scanner finds the imports it is meant to judge (a broken scanner would pass everything)."""
    edges = graph(REPO)
    assert any(e.source == "tokenrouter.evals.bench" and e.target == "tokenrouter.system" for e in edges)
    assert any(e.source == "tokenrouter.evals.systems" and layer(e.target) == "core" for e in edges)
    assert any(layer(e.source) == "baselines" and layer(e.target) == "core" for e in edges)
    assert {layer(m) for m in modules(REPO)} == {"core", "baselines", "evals", "app"}
    assert any(e.source == "tokenrouter.cli.bench" and layer(e.target) == "evals" for e in edges)
    parts = {(core_part(e.source), core_part(e.target)) for e in edges}
    # every part of CORE_ORDER is seen importing or imported by another part
    assert {p for pair in parts for p in pair} >= set(CORE_ORDER)
    assert ("runtime", "algorithms") in parts and ("api", "engine") in parts and ("engine", "registry") in parts
    assert ("server", "runtime") in parts


def test_no_upward_imports_and_no_cycles() -> None:
    found = problems(REPO)
    assert not found, "import graph problems:\n" + "\n".join(found)


def test_a_planted_upward_import_and_cycle_fail(tmp_path: Path) -> None:
    for rel, text in {"tokenrouter/__init__.py": "", "tokenrouter/a.py": "from tokenrouter.evals import b\n",
                      "tokenrouter/baselines/__init__.py": "",
                      "tokenrouter/baselines/d.py": "from ..evals import c\n",
                      "tokenrouter/evals/__init__.py": "",
                      "tokenrouter/evals/b.py": "def f():\n    from . import c\n",
                      "tokenrouter/evals/c.py": "import tokenrouter.evals.b\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = problems(tmp_path)
    assert found[0] == "upward: tokenrouter/a.py:1: tokenrouter.a (core) imports tokenrouter.evals.b (evals)", found
    assert found[1] == ("upward: tokenrouter/baselines/d.py:1: tokenrouter.baselines.d (baselines) imports "
                        "tokenrouter.evals.c (evals)"), found
    assert found[2].startswith("cycle: tokenrouter.evals.b -> tokenrouter.evals.c -> tokenrouter.evals.b"), found


def test_a_planted_import_of_the_old_top_level_names_fails(tmp_path: Path) -> None:
    """`evals` and `baselines` are other distributions' import names (OpenAI's): an import of them would load
    theirs where they are installed, or nothing."""
    for rel, text in {"tokenrouter/__init__.py": "", "tokenrouter/evals/__init__.py": "",
                      "tokenrouter/evals/a.py": "from baselines import lockstep\n",
                      "tests/test_a.py": "def f():\n    import evals.bench\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert problems(tmp_path) == [
        "foreign: tokenrouter/evals/a.py:1: imports baselines, another distribution's name (this project's is "
        "tokenrouter.baselines)",
        "foreign: tests/test_a.py:2: imports evals.bench, another distribution's name (this project's is "
        "tokenrouter.evals.bench)"]


def test_a_planted_import_against_the_core_order_fails(tmp_path: Path) -> None:
    """The import this order was written against: the algorithm contract importing the algorithms (for an
    error message listing them), and the registry importing what it names."""
    for rel, text in {"tokenrouter/__init__.py": "", "tokenrouter/algorithms/__init__.py": "",
                      "tokenrouter/algorithms/stay.py": "from tokenrouter.api import register\n",
                      "tokenrouter/api.py": "def f():\n    import tokenrouter.algorithms.stay\n",
                      "tokenrouter/registry.py": "from tokenrouter.engine import sim\n",
                      "tokenrouter/engine/__init__.py": "", "tokenrouter/engine/sim.py": "",
                      "tokenrouter/baselines/__init__.py": "", "tokenrouter/evals/__init__.py": ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = problems(tmp_path)
    assert found[0].startswith("core order: tokenrouter/api.py:2: tokenrouter.api (api) imports "
                               "tokenrouter.algorithms.stay (algorithms); order: registry < engine < api"), found
    assert found[1].startswith("core order: tokenrouter/registry.py:1: tokenrouter.registry (registry) imports "
                               "tokenrouter.engine.sim (engine)"), found
    assert found[2].startswith("cycle: tokenrouter.algorithms.stay -> tokenrouter.api"), found


def test_a_planted_import_of_the_server_by_the_runtime_fails(tmp_path: Path) -> None:
    """The runtime knows the server only through the Protocol the server defines, never by importing it."""
    for rel, text in {"tokenrouter/__init__.py": "", "tokenrouter/runtime/__init__.py": "",
                      "tokenrouter/runtime/frontend.py": "from tokenrouter.server.frontend_api import FrontEnd\n",
                      "tokenrouter/server/__init__.py": "", "tokenrouter/server/frontend_api.py": "",
                      "tokenrouter/server/app.py": "from tokenrouter.runtime import frontend\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert problems(tmp_path) == [
        "core order: tokenrouter/runtime/frontend.py:1: tokenrouter.runtime.frontend (runtime) imports "
        "tokenrouter.server.frontend_api (server); order: registry < engine < api < perfmodel < algorithms < "
        "system < runtime < server"]


if __name__ == "__main__":
    found = problems(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO)
    print("\n".join(found) or "import graph: no upward edges, no cycles")
    sys.exit(1 if found else 0)
