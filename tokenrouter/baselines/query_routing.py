"""`system=query_routing`: RouteLLM query-level routing, the paper's query-level baseline (Pareto study).

A RouteLLM router (PyPI `routellm`, optional extra) scores each prompt's strong-model win rate; the threshold is
calibrated on the workload's own prompts so that `strong_share` of the queries go to the strong model (the
last model of the set); each query then runs whole on one model (weak = the entry model), each model served by
the TokenRouter runtime alone (`stay` algorithm), so only the routing granularity differs from token-level runs;
or, with `server: sglang`, by a real SGLang server per model, as the paper ran RouteLLM.

RouteLLM quirks handled here:
- importing any of its routers needs OPENAI_API_KEY set (its similarity-weighted module builds an OpenAI
  client at import); when unset we set a placeholder for the import only, and log that we did. `mf` and
  `sw_ranking` call OpenAI embeddings when scoring, so they need a real key (clear error otherwise).
- `random` draws from Python's global `random`; we seed it from the experiment seed and restore the state.
- `bert`, `mf`, `causal_llm` load checkpoints (Hub ids by default, or `router_kwargs.checkpoint_path`);
  `causal_llm` needs CUDA. A router that cannot be built gives one clear error.
In this repo's venv routellm is installed with `pip install --no-deps routellm openai scikit-learn` (all its
router module imports need); a plain `pip install routellm` also works but pulls litellm and boto3.

RouteLLM's own metrics (APGR, CPT(50%)) need per-prompt correctness of the weak-only and strong-only runs:
give their run dirs (`system.weak_run`, `system.strong_run`, from `system=single` runs on the same workload)
and the summary reports the metrics of this router's scores over the whole share axis.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

from tokenrouter.baselines.routellm_metrics import apgr, cpt
from tokenrouter.baselines.sglang_server import SGLangServerOptions
from tokenrouter.baselines.single import model_system, server_options
from tokenrouter.config import ModelSpec, RuntimeConfig
from tokenrouter.engine.factory import prepare_models
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.system import ServingSystem, SystemSetup

log = logging.getLogger(__name__)

ROUTERS = ("random", "bert", "mf", "sw_ranking", "causal_llm")
_PLACEHOLDER_KEY = "placeholder-for-routellm-import"


def load_router(name: str, kwargs: dict[str, Any]) -> Any:
    """Build a RouteLLM router by name (see the module docstring for the OPENAI_API_KEY placeholder)."""
    if name not in ROUTERS:
        raise UserError(f"system.router must be one of {ROUTERS}, got {name!r}")
    placeholder = not os.environ.get("OPENAI_API_KEY")
    if placeholder:
        log.warning("OPENAI_API_KEY is unset: setting a placeholder only to import RouteLLM's routers")
        os.environ["OPENAI_API_KEY"] = _PLACEHOLDER_KEY
    try:
        from routellm.routers.routers import ROUTER_CLS
    except ImportError as exc:
        raise UserError(f"system=query_routing needs the `routellm` package ({exc}); "
                        "install it with `pip install routellm` (or `pip install -e .[routellm]`)") from None
    finally:
        if placeholder:
            del os.environ["OPENAI_API_KEY"]
    try:
        return ROUTER_CLS[name](**kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure to build a router is a configuration problem here
        raise UserError(f"RouteLLM router {name!r} could not be built ({type(exc).__name__}: {exc}); "
                        "bert/mf/causal_llm need their checkpoints (system.router_kwargs.checkpoint_path), "
                        "sw_ranking its arena datasets, causal_llm a GPU") from None


def strong_threshold(win_rates: list[float], strong_share: float) -> float:
    """The win-rate threshold sending round(strong_share * n) of these prompts to the strong model
    (RouteLLM's calibration: a quantile of the calibration prompts' win rates, made exact on ranks)."""
    if not 0.0 <= strong_share <= 1.0:
        raise UserError(f"system.strong_share must be in [0, 1], got {strong_share}")
    ranked = sorted(win_rates, reverse=True)
    k = round(strong_share * len(ranked))
    return float("inf") if k == 0 else ranked[k - 1]


def load_correct(run_dir: str) -> dict[int, bool]:
    """Per-prompt correctness (by workload index) from a run dir's requests.jsonl."""
    path = Path(run_dir) / "requests.jsonl"
    if not path.is_file():
        raise UserError(f"query_routing: no requests.jsonl in run dir {run_dir}")
    correct: dict[int, bool] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("correct") is None:
            raise UserError(f"query_routing: {path} has ungraded requests (needs a graded workload)")
        correct[int(row["index"])] = bool(row["correct"])
    return correct


def routellm_metrics(win_rates: dict[int, float], weak: dict[int, bool], strong: dict[int, bool]) -> dict:
    """APGR and CPT(50%) of a router's scores, as RouteLLM evaluates them: sweep the threshold over every
    prompt, sending the k highest-scored to the strong model, with each model's per-prompt correctness."""
    missing = sorted(set(win_rates) - (set(weak) & set(strong)))
    if missing:
        raise UserError(f"query_routing: weak/strong runs lack prompts {missing[:5]} of this workload")
    ranked = sorted(win_rates, key=lambda i: -win_rates[i])
    n = len(ranked)
    weak_acc = sum(weak[i] for i in ranked) / n
    strong_acc = sum(strong[i] for i in ranked) / n
    points = []
    for k in range(1, n):
        hits = sum(strong[i] for i in ranked[:k]) + sum(weak[i] for i in ranked[k:])
        points.append((k / n, hits / n))
    return {"weak_accuracy": weak_acc, "strong_accuracy": strong_acc, "apgr": apgr(points, weak_acc, strong_acc),
            "cpt50": cpt(points, weak_acc, strong_acc, 0.5)}


class QueryRoutingSystem(ServingSystem):
    """Whole queries on the weak (entry) or strong (last) model, chosen by a RouteLLM router's win rate."""

    def __init__(self, weak: ModelSpec, strong: ModelSpec, runtime: RuntimeConfig, seed: int, *,
                 router: str = "random", strong_share: float = 0.3, router_kwargs: dict | None = None,
                 weak_run: str | None = None, strong_run: str | None = None, server: str = "tokenrouter",
                 sglang: SGLangServerOptions | None = None) -> None:
        self.model_names = [weak.name, strong.name]
        self.router_name = router
        self.router_kwargs = dict(router_kwargs or {})
        self.strong_share = float(strong_share)
        strong_threshold([], self.strong_share)  # validate early
        self.seed = seed
        self.runs = (weak_run, strong_run)
        self.server = server
        self.specs = [weak, strong]
        self._system_args = (runtime, seed, server, sglang)
        self.systems = [model_system(spec, *self._system_args) for spec in self.specs]
        self.win_rates: dict[int, float] = {}
        self.threshold: float | None = None
        self.routed = [0, 0]

    async def start(self) -> None:
        if self.server == "sglang":  # both servers' KV planned jointly (never by which started first), downloaded
            planned = await asyncio.to_thread(prepare_models, self.specs)
            self.systems = [model_system(spec, *self._system_args) for spec in planned]
        started = await asyncio.gather(*(s.start() for s in self.systems), return_exceptions=True)
        failed = [e for e in started if isinstance(e, BaseException)]
        if failed:  # one model's server did not come up: stop the other's before saying why
            await self.close()
            raise failed[0]

    def reset_stats(self) -> None:
        for s in self.systems:
            s.reset_stats()

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.systems), return_exceptions=True)

    def calibrate(self, requests: list[GenerationRequest], texts: list[str]) -> None:
        """Score every prompt once and set the threshold for the target strong share on these prompts."""
        router = load_router(self.router_name, self.router_kwargs)
        state = random.getstate()
        random.seed(self.seed)  # RouteLLM's random router draws from the global generator
        try:
            rates = [float(router.calculate_strong_win_rate(text)) for text in texts]
        except Exception as exc:  # noqa: BLE001 - e.g. mf/sw_ranking without a real OpenAI key
            raise UserError(f"RouteLLM router {self.router_name!r} failed to score a prompt: "
                            f"{type(exc).__name__}: {exc}") from None
        finally:
            random.setstate(state)
        self.win_rates = {req.index: rate for req, rate in zip(requests, rates, strict=True)}
        self.threshold = strong_threshold(rates, self.strong_share)

    def choose(self, index: int) -> int:
        """0 = weak, 1 = strong."""
        if self.threshold is None or index not in self.win_rates:
            raise RuntimeError(f"query_routing: request {index} was not in the calibration set (call calibrate)")
        return int(self.win_rates[index] >= self.threshold)

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        target = self.choose(req.index)
        self.routed[target] += 1
        result = await self.systems[target].generate(req)
        result.extra.update(routed_to=self.model_names[target], win_rate=self.win_rates[req.index])
        return result

    def stats(self) -> dict:
        total = sum(self.routed)
        return {
            "system": "query_routing",
            "server": self.server,
            "router": self.router_name,
            "threshold": self.threshold,
            "strong_share_target": self.strong_share,
            "strong_share": self.routed[1] / total if total else None,
            "models": {name: s.stats() for name, s in zip(self.model_names, self.systems, strict=True)},
        }

    def summary_extra(self) -> dict:
        """RouteLLM's metrics of this router's scores when the weak-only and strong-only runs are given."""
        if not all(self.runs):
            return {}
        weak, strong = (load_correct(r) for r in self.runs)
        return {"routellm": routellm_metrics(self.win_rates, weak, strong)}


def from_setup(setup: SystemSetup) -> QueryRoutingSystem:
    known = {"router", "strong_share", "router_kwargs", "weak_run", "strong_run"}
    setup.unknown_fields(known | {"server", "sglang"})
    if len(setup.models) < 2:
        raise UserError("system=query_routing needs at least two models (weak = first, strong = last)")
    opts = {k: setup.system[k] for k in known if setup.system.get(k) is not None}
    server, sglang = server_options(setup)
    return QueryRoutingSystem(setup.models[0], setup.models[-1], setup.runtime, setup.seed, server=server,
                              sglang=sglang, **opts)
