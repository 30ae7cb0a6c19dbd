"""Route and commit matrices (P, C) of the routing algorithms, built from one or two numbers.

- one-token return (`r2r`, `citer`, `co_llm`, `bernoulli`): the small model hands off with probability p and
  commits nothing on that step (the large model regenerates the token); the large model commits one token and
  returns: P = [[1-p, p], [1, 0]], C = [[1, 0], [1, 0]].
- `rstitch`: symmetric; small -> large with p01, large -> small with p10, every step commits its token.
- `ensemble`: after every token the next model is drawn from fixed weights w (2+ models), every step commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokenrouter.errors import UserError

Matrix = list[list[float]]
ONE_TOKEN_RETURN = ("r2r", "citer", "co_llm", "bernoulli")
PRESETS = (*ONE_TOKEN_RETURN, "rstitch", "ensemble")


def one_token_return(p: float) -> tuple[Matrix, Matrix]:
    _check_prob(p, "route probability")
    return [[1.0 - p, p], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]


def rstitch(p01: float, p10: float) -> tuple[Matrix, Matrix]:
    _check_prob(p01, "p01")
    _check_prob(p10, "p10")
    return [[1.0 - p01, p01], [p10, 1.0 - p10]], [[1.0, 1.0], [1.0, 1.0]]


def ensemble(weights: Sequence[float]) -> tuple[Matrix, Matrix]:
    w = [float(x) for x in weights]
    if len(w) < 2 or any(x < 0 for x in w) or sum(w) <= 0:
        raise UserError(f"ensemble needs 2+ non-negative weights with a positive sum, got {w}")
    row = [x / sum(w) for x in w]
    return [list(row) for _ in w], [[1.0] * len(w) for _ in w]


def preset(
    name: str,
    route_prob: float | None = None,
    p10: float | None = None,
    weights: Sequence[float] | None = None,
) -> tuple[Matrix, Matrix]:
    """(P, C) for a named preset; `route_prob` is p (one-token return) or p01 (rstitch)."""
    if name in ONE_TOKEN_RETURN:
        return one_token_return(_need(route_prob, name, "a route probability"))
    if name == "rstitch":
        return rstitch(
            _need(route_prob, name, "p01 (small -> large)"), _need(p10, name, "p10 (large -> small)")
        )
    if name == "ensemble":
        return ensemble(_need(weights, name, "weights"))
    raise UserError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")


def preset_for_algorithm(name: str, params: Mapping[str, Any]) -> tuple[Matrix, Matrix]:
    """(P, C) from an algorithm's config params, for `thresholds=auto`.

    Only `bernoulli` (route_prob), `ensemble` (weights) and `rstitch` with measured rates (p01, p10) fix the
    routing rates in their params; learned routers (r2r, citer, co_llm) need a measured hand-off rate given as
    `route_prob` (e.g. from a previous run's token share), since their threshold alone does not determine it.
    """
    if name in ONE_TOKEN_RETURN:
        return one_token_return(
            float(_need(params.get("route_prob"), name, "`route_prob` (measured hand-off rate)"))
        )
    if name == "rstitch":
        return rstitch(
            float(_need(params.get("p01"), name, "`p01`")), float(_need(params.get("p10"), name, "`p10`"))
        )
    if name == "ensemble":
        return ensemble(_need(params.get("weights"), name, "`weights`"))
    raise UserError(f"no throughput-model preset for algorithm {name!r}; known: {', '.join(PRESETS)}")


def _need(value: Any, name: str, what: str) -> Any:
    if value is None:
        raise UserError(f"preset {name!r} needs {what}")
    return value


def _check_prob(p: float, what: str) -> None:
    if not 0.0 <= p <= 1.0:
        raise UserError(f"{what} must be in [0, 1], got {p}")
