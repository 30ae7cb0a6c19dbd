"""The shape R2R, CITER and Co-LLM share: a learned router on the small model flags tokens; a flagged token
is dropped and the large model regenerates it (one token), commits it and hands the request back.

Subclasses name their router kind and turn the router's raw logit into a decision (`flags`). The router is
loaded in `bind()` (inside the small model's subserver process, on its engine's device) and scores the whole
step's batch in one forward, so routing never leaves the process.
"""

from __future__ import annotations

import json
import math
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import torch

from tokenrouter.algorithms.checkpoints import check_router, load_router
from tokenrouter.algorithms.rates import measured_rate
from tokenrouter.algorithms.router_sources import resolve_router
from tokenrouter.algorithms.routers import RouterNet
from tokenrouter.api import Needs, RouterRequest, RoutingAlgorithm, StepResult
from tokenrouter.engine.base import Engine
from tokenrouter.errors import UserError

WEIGHTLESS = "sim engines have no weights: use algorithm=bernoulli with them"


def logit(p: float) -> float:
    """log(p / (1 - p)), with 0 -> -inf and 1 -> +inf: thresholds compare raw router logits, so a threshold of
    exactly 1 (or 0) never (always) routes even where float32 sigmoid would saturate."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p) - math.log1p(-p)


class LearnedRouting(RoutingAlgorithm):
    """Small model (index 0) + large model (index 1); the small side routes by a trained router of the
    algorithm's `name` kind (tokenrouter.algorithms.routers.ROUTERS)."""

    # The router reads the hidden state, and the logits when it has a top-k input (known once it is loaded);
    # its rate is measured while serving, its saved held-out rate the prior.
    needs = Needs(rates="measured")
    threshold_name: ClassVar[str] = "threshold"

    def __init__(self, model_index: int, model_names: list[str], router: str | None = None, **params: Any) -> None:
        threshold = params.pop(self.threshold_name, None)  # `threshold`, CITER's `tau`, Co-LLM's `eta`
        super().__init__(model_index, model_names, **params)
        if self.num_models != 2:
            raise UserError(f"{self.name}: needs exactly 2 models (small, large), got {self.num_models}")
        if threshold is not None and not 0.0 <= float(threshold) <= 1.0:
            raise UserError(f"{self.name}: {self.threshold_name} must be in [0, 1], got {threshold}")
        self.router_path = router
        self.threshold = None if threshold is None else float(threshold)
        self.net: RouterNet | None = None
        self.router_meta: dict[str, Any] = {}
        self.device = torch.device("cpu")

    @classmethod
    def resolve_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        router = params.get("router")
        return {**params, "router": str(resolve_router(str(router)))} if router else params

    def check(self) -> None:
        if self.model_index == 0:  # the router's files, read once here without the small model's engine
            check_router(self._router(), self.name)

    def _router(self) -> str:
        if not self.router_path:
            raise UserError(
                f"{self.name}: no router given; set algorithm.router=PATH "
                f"(train one with `tokenrouter train-router --algorithm {self.name}`)"
            )
        return str(self.router_path)

    def bind(self, engine: Engine) -> None:
        if self.model_index != 0:
            return  # the large side only generates one token and returns
        path = self._router()
        if not engine.hidden_size:
            raise UserError(f"{self.name}: model {self.model_names[0]!r} has no hidden states; {WEIGHTLESS}")
        emb = engine.input_embeddings()
        loaded = load_router(path, self.name, None if emb is None else emb.weight)
        expected = loaded.net.config.hidden_states_size
        if expected != engine.hidden_size:
            raise UserError(
                f"{self.name}: router {self.router_path!r} reads hidden states of size {expected}, model "
                f"{self.model_names[0]!r} has {engine.hidden_size} (a router trained for another small model?)"
            )
        self.device = torch.device(engine.device)
        self.net = loaded.net.to(self.device)
        self.router_meta = loaded.meta
        if self.threshold is None:
            if loaded.threshold is None:
                raise UserError(f"{self.name}: router {self.router_path!r} saves no threshold; set {self.threshold_name}")
            self.threshold = loaded.threshold

    def route(self, step: StepResult) -> list[int]:
        if self.model_index != 0:
            return [0] * len(step)
        if self.net is None or self.threshold is None:
            raise UserError(f"{self.name}: router not loaded (bind() was not called with the small model's engine)")
        if step.hidden is None or (self.net.top_k and step.logits is None):
            raise UserError(
                f"{self.name}: the router needs the small model's hidden states"
                f"{' and logits' if self.net.top_k else ''}; model {self.model_names[0]!r} gives none; {WEIGHTLESS}"
            )
        with torch.inference_mode():
            tokens = torch.tensor(step.next_tokens, dtype=torch.long, device=self.device)
            logits = None if step.logits is None else step.logits.to(self.device)
            raw = self.net.score(step.hidden.to(self.device), tokens, logits)
            flags = self.flags(raw.double())
        return [1 if f else 0 for f in flags.tolist()]

    @abstractmethod
    def flags(self, raw: torch.Tensor) -> torch.Tensor:
        """Rows to hand to the large model, from the router's raw logits."""

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        return self.model_index != 0  # small drops its token (large regenerates); large's token is committed

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        """Throughput-model preset: the one-token-return shape with the small model's hand-off probability,
        measured, else estimated from what was saved with a trained router (see _prior_route_prob)."""
        p = measured_rate(routes, 0, 1)
        return {"preset": self.name, "route_prob": self._prior_route_prob() if p is None else p}

    def _prior_route_prob(self) -> float | None:
        """The held-out route rate saved with the router when it is used at its saved threshold; at another
        threshold, the share of the saved held-out raw-score quantiles this algorithm would flag. None for
        official checkpoints and Hub paths (no sidecar): then only measurements tell."""
        path = Path(str(self.router_path or "")).expanduser()
        sidecar = path / "router.json" if path.is_dir() else path.with_suffix(".json")
        try:
            doc = json.loads(sidecar.read_text())
        except (OSError, ValueError):
            return None
        metrics = doc.get("metrics") or {}
        saved = doc.get("threshold")
        if self.threshold is None or (saved is not None and math.isclose(saved, self.threshold)):
            rate = metrics.get("heldout_route_rate")
            return None if rate is None else float(rate)
        quantiles = metrics.get("heldout_raw_quantiles")
        if not quantiles:
            return None  # trained at another threshold, no score distribution saved: its rate does not apply
        return float(self.flags(torch.tensor(quantiles, dtype=torch.float64)).double().mean())
