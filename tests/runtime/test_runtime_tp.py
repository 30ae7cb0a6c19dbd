"""Tensor parallelism inside the runtime (real subservers whose large model runs as two rank processes):
outputs equal the tp=1 run token for token, and SIGINT of `tokenrouter serve` leaves no rank behind.

The tp=1 reference is the lock-step system in this process (its outputs equal the runtime's: test_handoff_systems.py,
test_declared_needs.py), which spares two more processes that each import torch and transformers."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx

from tokenrouter.baselines.lockstep import LockstepSystem
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.generation import GenerationRequest

from .conftest import Frontends, generate_on_each, started
from .http_helpers import start_server, stop_cleanly

SMALL = ModelSpec(name="small", source="tiny-random:small", engine="torch", kv_tokens=4096)
LARGE = ModelSpec(name="large", source="tiny-random:large", engine="torch", kv_tokens=4096)
LARGE_TP2 = ModelSpec(name="large", source="tiny-random:large", engine="torch", kv_tokens=4096, tp=2)
ALGO = AlgorithmSpec("bernoulli", {"route_prob": 0.35})
RT = RuntimeConfig(thresholds=[1, 2], max_wait_ms=10.0)


def test_large_model_at_tp2_gives_the_tp1_outputs() -> None:
    reqs = [GenerationRequest([3 + i, 4, 5, 6][: 2 + i % 3], max_new_tokens=16, seed=i, index=i, stop_token_ids=[])
            for i in range(6)]
    f = Frontends({"tp2": ([SMALL, LARGE_TP2], ALGO, RT)})
    try:
        got = f.run(f.fe["tp2"].generate_many(reqs))
    finally:
        f.close()
    ref = asyncio.run(_lockstep(reqs))
    assert [r.output_ids for r in got] == [r.output_ids for r in ref]
    assert [r.tokens_per_model for r in got] == [r.tokens_per_model for r in ref]
    assert sum(r.tokens_per_model["large"] for r in got) > 0  # the TP model really generated


async def _lockstep(reqs: list[GenerationRequest]) -> list:
    system = LockstepSystem([SMALL, LARGE], ALGO, RuntimeConfig())
    async with started(system):
        [results] = await generate_on_each((system,), reqs, 300)
    return results


def test_sigint_with_tp_ranks_running_leaves_no_process(tmp_path: Path) -> None:
    server = start_server(["models=tiny-random", "++models.members.1.tp=2", "runtime.thresholds=[1,1]",
                           "algorithm=bernoulli", "algorithm.route_prob=0.5"], tmp_path)
    resp = httpx.post(f"{server.url}/v1/completions", timeout=60,
                      json={"prompt": [5, 6, 7], "max_tokens": 8, "return_token_ids": True})
    assert resp.status_code == 200, resp.text
    assert len(server.descendants()) >= 3  # two subservers and the large model's second rank
    stop_cleanly(server, signal.SIGINT)  # no descendant alive, no tokenrouter-* directory left
