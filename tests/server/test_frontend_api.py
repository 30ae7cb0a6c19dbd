"""The server's typed interface of the front end (tokenrouter/server/frontend_api.py): it lists exactly the
members the server uses, and every front end handed to the server implements each of them with a compatible
signature, so a new front end (or a new member) cannot silently miss one."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import pytest

from tokenrouter.runtime.frontend import TokenRouterFrontend
from tokenrouter.server.frontend_api import FrontEnd

ROOT = Path(__file__).resolve().parents[2]


def _reference_front_end() -> type:
    """docs/gen_reference.py's front end (the app built for the HTTP reference page): a script, not a module."""
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.UnservedFrontEnd


# Every class whose instances are passed to create_app / HttpServer, by the file that passes them.
FRONT_ENDS: dict[str, Any] = {"tokenrouter/cli/serve.py": lambda: TokenRouterFrontend,
                              "docs/gen_reference.py": _reference_front_end}


def protocol_members(protocol: type) -> dict[str, Any]:
    """Name -> what the Protocol declares: a function, a property, or None for a plain attribute."""
    out: dict[str, Any] = dict.fromkeys(protocol.__dict__.get("__annotations__", {}))
    for name, value in vars(protocol).items():
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
            out[name] = value
    return out


def _annotated(cls: type, name: str) -> bool:
    return any(name in vars(c).get("__annotations__", {}) for c in cls.__mro__)


def missing(cls: type, protocol: type = FrontEnd) -> list[str]:
    """Why `cls` does not implement `protocol`, one line per member (empty: it does)."""
    out = []
    for name, declared in protocol_members(protocol).items():
        try:
            impl = inspect.getattr_static(cls, name)
        except AttributeError:
            impl = None
        if not inspect.isfunction(declared):  # an attribute or a read-only property: any readable attribute does
            if impl is None and not _annotated(cls, name):
                out.append(f"{name}: missing (an attribute or property)")
            elif inspect.isfunction(impl):
                out.append(f"{name}: a method, where an attribute is needed")
            continue
        if not inspect.isfunction(impl):
            out.append(f"{name}: {'missing' if impl is None else 'not a method'}")
            continue
        if inspect.iscoroutinefunction(declared) != inspect.iscoroutinefunction(impl):
            out.append(f"{name}: must {'' if inspect.iscoroutinefunction(declared) else 'not '}be `async def`")
        out += [f"{name}: {problem}" for problem in _signature_problems(declared, impl)]
    return out


def _signature_problems(declared: Any, impl: Any) -> list[str]:
    """Whether `impl` accepts every call the server may make as `declared` describes it."""
    want = list(inspect.signature(declared).parameters.values())[1:]  # without self
    have = inspect.signature(impl).parameters
    rest = list(have.values())[1:]
    out = []
    for i, p in enumerate(want):
        q = have.get(p.name)
        if q is None or q.kind not in (p.POSITIONAL_OR_KEYWORD, p.kind) or rest.index(q) != i:
            out.append(f"parameter {p.name!r} ({i + 1}.) missing or of another kind")
        elif p.default is not p.empty and q.default is q.empty:
            out.append(f"parameter {p.name!r} needs a default")
    extra = [q.name for q in rest if q.name not in {p.name for p in want} and q.default is q.empty
             and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]
    out += [f"parameter {name!r} is not in the interface and has no default" for name in extra]
    return out


@pytest.mark.parametrize("where", sorted(FRONT_ENDS))
def test_every_front_end_implements_every_member(where: str) -> None:
    cls = FRONT_ENDS[where]()
    assert missing(cls) == [], f"{cls.__name__} ({where}) does not implement tokenrouter.server.FrontEnd"


def test_the_check_catches_a_front_end_that_misses_or_misshapes_a_member() -> None:
    class Partial:
        model_names: list[str]

        def stream(self, req: Any, extra: int) -> Any: ...

        async def health_problem(self) -> str | None: ...

        async def refresh_stats(self) -> dict[str, Any]: ...

        def close(self) -> None: ...

    problems = missing(Partial)
    assert "eos_token_ids: missing (an attribute or property)" in problems
    assert "start: missing" in problems and "algorithm_trouble: missing" in problems
    assert "stream: parameter 'extra' is not in the interface and has no default" in problems
    assert "health_problem: must not be `async def`" in problems
    assert "refresh_stats: parameter 'timeout_s' (1.) missing or of another kind" in problems
    assert "close: must be `async def`" in problems
    assert not any(p.startswith("model_names") for p in problems)


def _server_files() -> list[Path]:
    return sorted((ROOT / "tokenrouter" / "server").glob("*.py"))


def test_the_interface_lists_exactly_the_members_the_server_uses() -> None:
    """Every `frontend.X` / `self.frontend.X` in the server package is a member of FrontEnd, and every member
    is used (the server probes nothing: no hasattr / getattr on the front end)."""
    used: set[str] = set()
    for path in _server_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                owner = node.value
                if (isinstance(owner, ast.Name) and owner.id == "frontend") or (
                        isinstance(owner, ast.Attribute) and owner.attr == "frontend"):
                    used.add(node.attr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "hasattr", "getattr") and node.args:
                probed = ast.unparse(node.args[0])
                assert "frontend" not in probed, f"{path.name}:{node.lineno}: probes the front end ({probed})"
    assert used == set(protocol_members(FrontEnd))


def test_every_file_that_builds_a_server_names_its_front_end_here() -> None:
    """A new caller of create_app / HttpServer passes a front end this module must check (FRONT_ENDS)."""
    callers = set()
    for folder in ("tokenrouter", "benchmarks", "docs", "scripts", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent.name == "server" and path.parent.parent.name == "tokenrouter":
                continue  # the server itself
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    if name in ("create_app", "HttpServer"):
                        callers.add(str(path.relative_to(ROOT)))
    assert callers == set(FRONT_ENDS)
