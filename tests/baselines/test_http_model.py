"""One model behind its own server, each request sent whole to /generate and read as a stream: against our
own `tokenrouter serve` here (the SGLang server in test_sglang_baselines.py). Greedy outputs must equal the
in-process runtime's, with per-commit timestamps, stop ids and min_new_tokens honoured."""

from __future__ import annotations

import asyncio

import pytest

from tokenrouter.baselines.http_model import HttpModelSystem, generate_body
from tokenrouter.baselines.single import single_model_system
from tokenrouter.config import RuntimeConfig, model_specs
from tokenrouter.engine.base import SamplingParams
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest

SMALL = model_specs({"members": [{"name": "small", "source": "tiny-random:small"}]})[0]


@pytest.mark.slow  # ~18 s of start-up; run by `make test-sglang`, whose SGLang tests use the same client
def test_whole_requests_over_http_equal_the_runtime() -> None:
    reqs = [GenerationRequest([5 + i, 9, 12, 40], max_new_tokens=12, seed=i, index=i) for i in range(3)]
    reqs.append(GenerationRequest([7, 7, 30], max_new_tokens=6, index=3, stop_token_ids=[], min_new_tokens=6))

    async def run() -> tuple[list, list, dict]:
        local = single_model_system(SMALL, RuntimeConfig())
        http = HttpModelSystem(SMALL, RuntimeConfig(), server="tokenrouter")
        try:
            await asyncio.gather(local.start(), http.start())
            expected = [await local.generate(r) for r in reqs]
            got = list(await asyncio.gather(*(http.generate(r) for r in reqs)))
            with pytest.raises(UserError, match="empty prompt"):
                await http.generate(GenerationRequest([], index=9))
            return expected, got, http.stats()
        finally:
            await asyncio.gather(local.close(), http.close())

    expected, got, stats = asyncio.run(run())
    for e, g in zip(expected, got, strict=True):
        assert g.output_ids == e.output_ids and g.finish_reason == e.finish_reason
        assert g.tokens_per_model == {"small": len(g.output_ids)}
        assert sum(n for _, n, _ in g.commits) == len(g.output_ids) and g.first_token_s is not None
    assert got[3].finish_reason == "length" and len(got[3].output_ids) == 6
    assert stats["requests"] == 4 and stats["tokens"] == sum(len(g.output_ids) for g in got)


def test_generate_body_is_sglangs_shape() -> None:
    body = generate_body([1, 2], SamplingParams(temperature=0.0, top_k=0, seed=3), 5, {9, 2}, 4)
    assert body == {"input_ids": [1, 2], "sampling_params": {
        "max_new_tokens": 5, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "stop_token_ids": [2, 9],
        "sampling_seed": 3, "min_new_tokens": 4}}
