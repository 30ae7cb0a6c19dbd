"""argparse helpers shared by subcommands: errors become one line + exit 2, like every other bad input."""

from __future__ import annotations

import argparse
from typing import Any

from tokenrouter.errors import UserError

# flags vLLM's and SGLang's servers take, as the Hydra override that does the same here
SERVER_FLAGS = {"--port": "server.port", "--host": "server.host", "--api-key": "server.api_key",
                "--served-model-name": "server.model_name", "--model": "models", "--model-path": "models",
                "--tensor-parallel-size": "models.members.N.tp", "--tp": "models.members.N.tp",
                "--tp-size": "models.members.N.tp", "--dtype": "models.members.N.dtype",
                "--max-model-len": "server.max_prompt_tokens", "--concurrency": "concurrency"}


def flag_hint(message: str, argv: list[str] | None = None) -> str:
    """argparse's "unrecognized arguments: --port 8001" with the override to use instead, when there is one
    (its value taken from the command line `argv` when given)."""
    words = message.replace("=", " ").replace("'", " ").split()
    given = [w for a in argv or [] for w in a.split("=", 1)]
    for flag, key in SERVER_FLAGS.items():
        if flag in words:
            after = given[given.index(flag) + 1:] if flag in given else words[words.index(flag) + 1:]
            value = after[0] if after and not after[0].startswith("-") else "VALUE"
            return f"{message} (tokenrouter takes Hydra overrides: {key}={value})"
    return message


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises UserError instead of printing usage and exiting (a vLLM / SGLang server flag gets
    the override that does the same here)."""

    _argv: list[str] | None = None

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # every parse_* goes through it
        self._argv = list(args) if args is not None else None
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(flag_hint(message, self._argv))


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values
