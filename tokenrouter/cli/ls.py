"""`tokenrouter ls [KIND] [--json]`: what is installed of each pluggable kind (routing algorithms, engines,
serving systems, workload loaders) and where each comes from: built in, an installed distribution's entry
point (named with its version), or registered in code.

Why: since outside packages add names through entry points (tokenrouter/registry.py), "is my package's system
installed, and under which name?" has an answer without reading site-packages. Nothing is imported to list
them: built-ins are "module:attr" strings, entry points are read from the installed metadata.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.errors import UserError, did_you_mean
from tokenrouter.registry import Registry

HELP = "list the installed algorithms, engines, systems and workload loaders, and where each comes from"

# kind -> (where its registry lives, the config key that picks a name of it)
KINDS: dict[str, tuple[str, str]] = {
    "algorithms": ("tokenrouter.registry:ALGORITHMS", "algorithm.name=NAME"),
    "engines": ("tokenrouter.registry:ENGINES", "models.members.N.engine=NAME"),
    "systems": ("tokenrouter.evals.systems:REGISTRY", "system=NAME with a conf/system/NAME.yaml, or system.name=NAME"),
    "workloads": ("tokenrouter.evals.workloads:LOADER_REGISTRY", "workload.loader=NAME"),
}


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter ls", description=HELP)
    p.add_argument("kind", nargs="?", help=f"one of {', '.join(KINDS)} (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON list of {name, kind, source, target}")
    return p


def kind_of(text: str) -> str:
    """A kind of KINDS as the user typed it (the singular too); one line with the nearest kind otherwise."""
    kind = text if text in KINDS else f"{text}s"
    if kind not in KINDS:
        raise UserError(f"unknown kind {text!r}{did_you_mean(kind, KINDS)}; known: {', '.join(KINDS)}")
    return kind


def registry(kind: str) -> Registry:
    """The registry of `kind` (a key of KINDS)."""
    import importlib

    module, _, attr = KINDS[kind][0].partition(":")
    return getattr(importlib.import_module(module), attr)


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    tables = {k: registry(k) for k in ([kind_of(args.kind)] if args.kind else KINDS)}
    if args.json:
        print(json.dumps([asdict(e) for r in tables.values() for e in r.entries()], indent=2))
        return 0
    blocks = []
    for kind, reg in tables.items():
        rows = [(e.name, e.source, e.target) for e in reg.entries()]
        widths = [max(len(r[i]) for r in rows) for i in range(2)]
        lines = [f"{reg.kind}s ({KINDS[kind][1]}; or {reg.dotted}; entry-point group {reg.group}):"]
        lines += [f"  {n:<{widths[0]}}  {s:<{widths[1]}}  {t}" for n, s, t in rows]
        blocks.append("\n".join(lines))
    print("\n\n".join(blocks))
    return 0
