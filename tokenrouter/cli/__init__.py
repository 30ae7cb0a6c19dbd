"""The `tokenrouter` command: one entry point, one module per subcommand (imported lazily).

Each subcommand module defines `HELP` (one line) and `run(argv: list[str]) -> int`. Bad input raises
`UserError`, printed here as one line with exit status 2 (no traceback); a storage fault (`StorageError`: disk
full, read-only, no permission) is one line with exit status 1.
"""

from __future__ import annotations

import importlib
import sys

from tokenrouter import event_loop
from tokenrouter.errors import StorageError, UserError

# name -> module; add a subcommand only when it works.
COMMANDS: dict[str, str] = {}


def _register(name: str, module: str) -> None:
    COMMANDS[name] = module


def _usage() -> str:
    lines = ["usage: tokenrouter [--version] COMMAND [ARGS...]", "", "commands:"]
    for name, module in COMMANDS.items():
        help_line = getattr(importlib.import_module(module), "HELP", "")
        lines.append(f"  {name:<14}{help_line}")
    lines.append("")
    lines.append("`tokenrouter COMMAND --help` explains each command.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from tokenrouter import __version__

        print(f"tokenrouter {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"tokenrouter: error: unknown command {name!r} (known: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    try:
        event_loop.loop_factory()  # a bad $TOKENROUTER_EVENT_LOOP: one line now, not after a model loaded
        return int(importlib.import_module(COMMANDS[name]).run(rest) or 0)
    except UserError as exc:
        print(f"tokenrouter {name}: error: {exc}", file=sys.stderr)
        return 2
    except StorageError as exc:
        print(f"tokenrouter {name}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tokenrouter {name}: interrupted", file=sys.stderr)
        return 130


_register("bench", "tokenrouter.cli.bench")
_register("serve", "tokenrouter.cli.serve")
_register("report", "tokenrouter.cli.report")
_register("plan", "tokenrouter.cli.plan")
_register("rehearse", "tokenrouter.cli.rehearse")
_register("trace", "tokenrouter.cli.trace")
_register("model", "tokenrouter.cli.model")
_register("generate", "tokenrouter.cli.generate")
_register("profile", "tokenrouter.cli.profile")
_register("train-router", "tokenrouter.cli.train_router")
_register("make-pair", "tokenrouter.cli.make_pair")
_register("demo", "tokenrouter.cli.demo")
_register("ls", "tokenrouter.cli.ls")
