"""One protocol, three systems: a randomized algorithm that overrides send() and receive()
(user_algorithms/resend.py: early anchors, drafts sent past the sequence and stripped on receipt) gives the
same greedy outputs, per-model token counts and hand-offs on the TokenRouter runtime (real subserver
processes), lock-step and Std. Serving (real single-model servers); requests with min_new_tokens (stop ids
masked in every model's sampler until then) end identically too. On the sim pair by default: its tokens are a
hash of the whole prefix its KV holds, so a KV that rolled back to the wrong anchor or missed a token changes
every later token, as with a real model, without a torch import per process; on the tiny-random pair under
`make test-slow` (test_declared_needs.py compares the three systems on torch models in the default suite)."""

from __future__ import annotations

import asyncio

import pytest

from tokenrouter.baselines.lockstep import LockstepSystem
from tokenrouter.baselines.std_serving import StdServingOptions, StdServingSystem
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.runtime.frontend import TokenRouterFrontend

from .conftest import generate_on_each, started, user_algorithms_importable

PAIRS = {"torch": [ModelSpec(name="small", source="tiny-random:small", kv_tokens=4096),
                   ModelSpec(name="large", source="tiny-random:large", kv_tokens=4096)],
         # the tiny-random models' vocabulary (100), so half of it stops requests as there
         "sim": [ModelSpec(name=name, engine="sim", kv_tokens=4096, sim=SimSpec(latency_ms=0.2, vocab_size=100,
                                                                              seed=seed))
                 for name, seed in (("small", 1), ("large", 2))]}
RESEND = AlgorithmSpec("user_algorithms.resend", {"route_prob": 0.4})
PROMPTS = [[5, 17, 33, 40], [2, 9, 40, 41, 7, 3, 88, 12, 13], [60, 61, 62], [44, 8, 19, 90, 1, 30]]


@pytest.mark.parametrize("engine", ["sim", pytest.param("torch", marks=pytest.mark.slow)])
def test_resend_gives_identical_outputs_on_all_three_systems(engine: str) -> None:
    specs = PAIRS[engine]
    reqs = [GenerationRequest(p, max_new_tokens=20, seed=10 + i, index=i) for i, p in enumerate(PROMPTS)]
    # half the vocabulary stops these two, but not before 8 tokens are out
    stops = list(range(50))
    reqs += [GenerationRequest(p, max_new_tokens=20, seed=20 + i, index=len(PROMPTS) + i, stop_token_ids=stops,
                               min_new_tokens=8) for i, p in enumerate(PROMPTS[:2])]
    runtime = RuntimeConfig(thresholds=[1, 1])

    async def run() -> tuple[list[list[GenerationResult]], dict]:
        router = TokenRouterFrontend(specs, RESEND, runtime)
        lockstep = LockstepSystem(specs, RESEND, RuntimeConfig())
        std = StdServingSystem(specs, RESEND, runtime,
                               options=StdServingOptions(return_logits=False, return_hidden_states=False))
        systems = (router, lockstep, std)
        async with started(*systems):
            return await generate_on_each(systems, reqs, 120), std.stats()

    with user_algorithms_importable():
        results, std_stats = asyncio.run(run())
    views = [[(r.output_ids, r.finish_reason, r.tokens_per_model, r.handoffs) for r in rs] for rs in results]
    assert views[1] == views[0], "lock-step differs from the TokenRouter runtime"
    assert views[2] == views[0], "Std. Serving differs from the TokenRouter runtime"
    assert sum(r.handoffs for r in results[0]) >= 10
    assert sum(r.tokens_per_model["large"] for r in results[0]) > 0
    # Std. Serving reports where a token's time goes (dispatcher, HTTP, server, model step)
    small = std_stats["models"]["small"]
    assert small["steps"] >= small["tokens_committed"] > 0 and small["handoffs_sent"] > 0
    cost = small["per_token_ms"]
    assert cost["dispatch"] >= cost["http_round_trip"] >= cost["server_handling"] > cost["model_step"] > 0
    assert 0 < cost["model_step_share"] < 1 and small["server"]["engine_steps"] > 0
    for r in results[0][len(PROMPTS):]:
        assert all(t not in stops for t in r.output_ids[:8]) and len(r.output_ids) > 8
        assert r.finish_reason == "length" or r.output_ids[-1] in stops
