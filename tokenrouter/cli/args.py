"""argparse helpers shared by subcommands: errors become one line + exit 2, like every other bad input."""

from __future__ import annotations

import argparse

from tokenrouter.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises UserError instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(message)


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
