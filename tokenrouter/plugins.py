"""Code from outside the package: Python entry points and dotted paths, importable from the working directory.

Why: a researcher's own routing algorithm, workload, baseline system or engine should not need a fork. As the
ecosystem does it (pytest plugins, Hydra plugins), an installed distribution names its objects under an
entry-point group (`tokenrouter.algorithms`, `tokenrouter.workloads`, `tokenrouter.systems`,
`tokenrouter.engines`), or a config names `package.module:Object` directly; tokenrouter/registry.py looks names
up through these helpers. The working directory is importable like `python -m` makes it, in the bench process
and in every subserver, so a `my_router.py` next to the user's config works without installing anything. Each
mistake is one line.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tokenrouter.errors import UserError, first_line

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint


def _with_cwd() -> None:
    """The working directory on the import path (as `python -m` puts it), once."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def import_module(module: str, what: str) -> ModuleType:
    """`module`, importable from the working directory too; a missing module is one line naming `what`."""
    _with_cwd()
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise UserError(f"{what}: no module {module!r} (not installed, and not in {os.getcwd()})") from None
        raise UserError(f"{what}: importing {module!r} failed: {first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - an error inside the user's module: one line naming it
        raise UserError(f"{what}: importing {module!r} failed: {type(exc).__name__}: {first_line(exc)}") from None


def import_object(target: str, what: str) -> Any:
    """`package.module:Object` -> the object."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise UserError(f"{what}: expected 'module:Object', got {target!r}")
    obj = import_module(module, what)
    try:
        return getattr(obj, attr)
    except AttributeError:
        raise UserError(f"{what}: module {module!r} has no {attr!r}") from None


def entry_points_of(group: str) -> list[EntryPoint]:
    """The entry points installed distributions declare in `group`, importing none of them."""
    from importlib.metadata import entry_points

    return list(entry_points(group=group))


def entry_point(group: str, name: str) -> Any | None:
    """The object an installed distribution registers as `name` in `group`, or None when none does."""
    found = [ep for ep in entry_points_of(group) if ep.name == name]
    if not found:
        return None
    if len({ep.value for ep in found}) > 1:
        raise UserError(f"{group}: {name!r} is registered by several installed packages: "
                        f"{sorted(ep.value for ep in found)}")
    _with_cwd()
    try:
        return found[0].load()
    except Exception as exc:  # noqa: BLE001 - a broken plugin: one line naming it
        raise UserError(f"{group}: entry point {name!r} ({found[0].value}) failed to load: "
                        f"{type(exc).__name__}: {first_line(exc)}") from None


def entry_point_names(group: str) -> list[str]:
    return sorted({ep.name for ep in entry_points_of(group)})
