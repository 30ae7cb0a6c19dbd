"""Routing algorithms, one small module each, found by name through `tokenrouter.registry.ALGORITHMS`.

`algorithm.name` is a built-in (bernoulli, citer, co_llm, ensemble, r2r, rstitch, stay), an installed entry
point in the `tokenrouter.algorithms` group, `package.module:Class`, or a dotted module registering an
algorithm of its last name; outside code is importable from the working directory (tokenrouter/plugins.py).
"""

from __future__ import annotations

from typing import Any

from tokenrouter.api import RoutingAlgorithm
from tokenrouter.registry import ALGORITHMS


def algorithm_class(name: str) -> type[RoutingAlgorithm]:
    """The algorithm class `algorithm.name` names (imported on first use); one UserError line if none."""
    return ALGORITHMS.get(name)


def build_algorithm(name: str, model_index: int, model_names: list[str], params: dict[str, Any]) -> RoutingAlgorithm:
    """One model's side of algorithm `name`, built with the config's `params`."""
    return algorithm_class(name)(model_index, model_names, **params)
