"""Every algorithm under the real runtime (subserver processes, ZeroMQ) on the tiny-random pair: extreme
settings reduce to single models, per-model token counts follow the routing decisions, runs are
deterministic per seed, and `tokenrouter train-router` produces a router that R2R then serves with."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
import torch

from tokenrouter.algorithms import build_algorithm
from tokenrouter.algorithms.checkpoints import save_router
from tokenrouter.algorithms.routers import build_router
from tokenrouter.algorithms.training import generate_greedy
from tokenrouter.api import stable_uniform
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.torch_engine import TorchEngine
from tokenrouter.generation import GenerationRequest
from tokenrouter.runtime.frontend import TokenRouterFrontend

MAX_NEW = 12
SMALL = ModelSpec(name="small", source="tiny-random:small", kv_tokens=4096)
LARGE = ModelSpec(name="large", source="tiny-random:large", kv_tokens=4096)
THIRD = ModelSpec(name="third", source="tiny-random:small", kv_tokens=4096)  # ensembles take 2+ models
RUNTIME = dict(max_wait_ms=5.0, startup_timeout_s=400.0)  # a loaded CI machine starts processes slowly


def _prompts(count: int = 4, seed: int = 7) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, 100) for _ in range(rng.randrange(6, 14))] for _ in range(count)]


def _requests(prompts: list[list[int]], seed0: int = 0) -> list[GenerationRequest]:
    return [GenerationRequest(p, max_new_tokens=MAX_NEW, seed=seed0 + i, index=i) for i, p in enumerate(prompts)]


class _Greedy:
    """Each model's own greedy continuation, straight through its engine (no runtime)."""

    def __init__(self) -> None:
        self.engines = {spec.name: TorchEngine.from_spec(spec) for spec in (SMALL, LARGE)}

    def __call__(self, model: str, prompt: list[int], max_new: int = MAX_NEW) -> list[int]:
        return generate_greedy(self.engines[model], [prompt], max_new, 1)[0]


@pytest.fixture(scope="module")
def greedy() -> _Greedy:
    return _Greedy()


@pytest.fixture(scope="module")
def random_router(tmp_path_factory) -> Path:
    """An untrained R2R router for the tiny-random small model (extreme thresholds do not need training)."""
    torch.manual_seed(0)
    net = build_router("r2r", {"hidden_states_size": 64, "vocab_size": 100, "hidden_dims": [64] * 2})
    out = tmp_path_factory.mktemp("router") / "r2r"
    save_router(net, out / "router", 0.5, {})
    return out


def _models(algo: AlgorithmSpec) -> list[ModelSpec]:
    """Ensembles give one weight per model; every other algorithm runs on the pair."""
    return [SMALL, LARGE, THIRD][: len(algo.params.get("weights") or [0, 0])]


async def _run(configs: dict[str, AlgorithmSpec], reqs: dict[str, list[GenerationRequest]]):
    """Start one front end per config concurrently (start-up dominates), run its requests, collect stats."""
    fes = {}
    for key, algo in configs.items():
        models = _models(algo)
        fes[key] = TokenRouterFrontend(models, algo, RuntimeConfig(thresholds=[1] * len(models), **RUNTIME))
    try:
        await asyncio.gather(*(f.start() for f in fes.values()))
        results = await asyncio.gather(*(fes[k].generate_many(reqs[k]) for k in configs))
        stats = await asyncio.gather(*(_settled(f) for f in fes.values()))
        return dict(zip(configs, results, strict=True)), dict(zip(configs, stats, strict=True))
    finally:
        await asyncio.gather(*(f.close() for f in fes.values()))


async def _settled(fe: TokenRouterFrontend) -> dict:
    """Stats once the last subserver reports are in: a result can overtake its peer's report (two sockets).
    Every subserver is asked for its current counters (stats that merely stopped changing for a while could
    still miss a report from a subserver a loaded machine has not run yet)."""
    return await fe.refresh_stats(timeout_s=60)


@pytest.fixture(scope="module")
def runs(random_router: Path):
    prompts = _prompts()
    configs = {
        "r2r_never": AlgorithmSpec("r2r", {"router": str(random_router), "threshold": 1.0}),
        "r2r_always": AlgorithmSpec("r2r", {"router": str(random_router), "threshold": 0.0}),
        "rstitch_0": AlgorithmSpec("rstitch", {"tau": 0.0}),
        "ens_mix": AlgorithmSpec("ensemble", {"weights": [0.5, 0.3, 0.2]}),
    }
    reqs = {k: _requests(prompts) for k in configs}
    reqs["ens_mix"] = _requests(prompts) + _requests(prompts) + _requests(prompts, seed0=100)
    results, stats = asyncio.run(_run(configs, reqs))
    return prompts, results, stats


def test_extreme_settings_reduce_to_single_models(runs, greedy: _Greedy) -> None:
    prompts, results, _ = runs
    for i, prompt in enumerate(prompts):
        small_out, large_out = greedy("small", prompt), greedy("large", prompt)
        assert small_out != large_out  # the pair disagrees, so the checks below can tell the models apart
        r = results["r2r_never"][i]  # (an ensemble weighting one model only: test_algorithms.py)
        assert r.output_ids == small_out
        assert r.tokens_per_model == {"small": len(small_out), "large": 0} and r.handoffs == 0
        r = results["r2r_always"][i]
        assert r.output_ids == large_out  # every small token dropped, the large model regenerates each
        assert r.tokens_per_model == {"small": 0, "large": len(large_out)}
        r = results["rstitch_0"][i]
        first = small_out[0]
        assert r.output_ids == [first] + greedy("large", prompt + [first], MAX_NEW - 1)
        assert r.tokens_per_model == {"small": 1, "large": len(r.output_ids) - 1} and r.handoffs == 1


def test_token_counts_follow_the_routing_decisions(runs) -> None:
    prompts, results, stats = runs
    mixed = results["ens_mix"]
    from tokenrouter.evals.metrics import summarize

    names = ["small", "large", "third"]
    owned = dict.fromkeys(names, 0)
    for r in mixed:
        seed = r.index + (100 if mixed.index(r) >= 2 * len(prompts) else 0)
        # Token 0 comes from the entry model; token p from the model drawn after token p - 1.
        draws = [stable_uniform("ensemble", seed, p) for p in range(len(r.output_ids) - 1)]
        owners = [0] + [0 if u < 0.5 else 1 if u < 0.8 else 2 for u in draws]
        assert r.tokens_per_model == {name: owners.count(i) for i, name in enumerate(names)}
        for i, name in enumerate(names):
            owned[name] += owners.count(i)
        assert r.handoffs == sum(a != b for a, b in zip(owners, owners[1:], strict=False))
    share = summarize(mixed, 1.0, names)["token_share"]  # what summary.json reports
    assert share == pytest.approx({name: owned[name] / sum(owned.values()) for name in names})
    for name, model in stats["ens_mix"]["models"].items():
        assert model["tokens_committed"] == sum(r.tokens_per_model[name] for r in mixed)
    assert sum(r.tokens_per_model["third"] for r in mixed) > 0  # requests really visit all three subservers
    always = stats["r2r_always"]["models"]
    generated = sum(len(r.output_ids) for r in results["r2r_always"])
    assert always["small"]["route_counts"] == {"small": 0, "large": generated}
    assert always["large"]["route_counts"] == {"small": generated, "large": 0}


def test_results_are_deterministic_per_seed(runs) -> None:
    prompts, results, _ = runs
    n = len(prompts)
    first, again, other = results["ens_mix"][:n], results["ens_mix"][n : 2 * n], results["ens_mix"][2 * n :]
    assert [r.output_ids for r in first] == [r.output_ids for r in again]
    assert [r.tokens_per_model for r in first] == [r.tokens_per_model for r in again]
    assert [r.tokens_per_model for r in first] != [r.tokens_per_model for r in other]


def test_train_router_end_to_end_then_r2r_serves_with_it(tmp_path: Path, greedy: _Greedy, capsys) -> None:
    from tokenrouter.cli import main

    out = tmp_path / "router"
    argv = ["train-router", "--algorithm", "r2r", "--out", str(out), "--epochs", "3", "--width", "32", "--blocks", "2",
            "models=tiny-random", "workload=synthetic", "workload.num_requests=32", "workload.output_tokens=48"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed)
    # the figures only: the 201 held-out score quantiles stay in router.json
    assert "heldout_raw_quantiles" not in summary and printed.count("\n") < 60
    # Random models disagree almost everywhere; the few agreements still give both classes to learn from.
    assert 0 < summary["labels"]["all"]["positives"] < summary["labels"]["all"]["positions"]
    assert 0.0 <= summary["heldout_auc"] <= 1.0 and summary["heldout_recall"] >= 0.9
    doc = json.loads((out / "router.json").read_text())
    assert doc["labels"]["all"]["positions"] == doc["labels"]["train"]["positions"] + doc["labels"]["heldout"]["positions"]
    assert doc["threshold"] == summary["threshold"]
    quantiles = doc["metrics"]["heldout_raw_quantiles"]
    assert len(quantiles) == 201 and quantiles == sorted(quantiles)
    # at its own threshold the saved rate; elsewhere the rate the saved score distribution implies
    assert build_algorithm("r2r", 0, ["s", "l"], {"router": str(out)}).rates()["route_prob"] == pytest.approx(
        doc["metrics"]["heldout_route_rate"])
    assert build_algorithm("r2r", 0, ["s", "l"], {"router": str(out), "threshold": 1.0}).rates()["route_prob"] == 0.0
    again = tmp_path / "again"
    assert main(argv[:4] + [str(again)] + argv[5:]) == 0  # same seed: the same router and threshold
    assert json.loads(capsys.readouterr().out)["threshold"] == summary["threshold"]
    assert (again / "router.safetensors").read_bytes() == (out / "router.safetensors").read_bytes()

    prompts = _prompts(count=3, seed=11)
    results, stats = asyncio.run(_run({"r2r": AlgorithmSpec("r2r", {"router": str(out)})}, {"r2r": _requests(prompts)}))
    for r in results["r2r"]:
        assert r.finish_reason in ("stop", "length") and sum(r.tokens_per_model.values()) == len(r.output_ids)
        # Each hand-off gets exactly one large-model token and a hand-back (none after a finishing token).
        assert r.handoffs in (2 * r.tokens_per_model["large"], 2 * r.tokens_per_model["large"] - 1)
    routed = stats["r2r"]["models"]["small"]["route_counts"]["large"]
    assert routed == sum(r.tokens_per_model["large"] for r in results["r2r"])  # each hand-off = one large token
