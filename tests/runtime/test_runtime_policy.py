"""`runtime.policy=optimal` end to end on sim engines: every subserver gets its launch rule for N with Active,
decides on it, and the outputs are those of any other schedule (sim tokens depend on the prefix only)."""

from __future__ import annotations

import pytest

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest
from tokenrouter.runtime.threshold_planner import plan_launch_rules

from .conftest import Frontends

SMALL = ModelSpec(name="small", engine="sim", kv_tokens=4096, sim=SimSpec(latency_ms=0.3, seed=11, vocab_size=500))
LARGE = ModelSpec(name="large", engine="sim", kv_tokens=4096, sim=SimSpec(latency_ms=0.9, seed=22, vocab_size=500))
ALGO = AlgorithmSpec("bernoulli", {"route_prob": 0.35})
MAX_N = 3


def _reqs() -> list[GenerationRequest]:
    return [GenerationRequest([5, i, 7], max_new_tokens=20, seed=i, index=i) for i in range(MAX_N)]


def test_optimal_policy_serves_the_same_tokens_on_its_launch_rules() -> None:
    base = RuntimeConfig(thresholds="auto", auto_max_concurrency=MAX_N, max_wait_ms=20.0)
    fes = Frontends({"thresholds": ([SMALL, LARGE], ALGO, base),
                     "optimal": ([SMALL, LARGE], ALGO, RuntimeConfig(**{**base.__dict__, "policy": "optimal"}))})
    try:
        rules, why = plan_launch_rules([SMALL, LARGE], ALGO, MAX_N)
        assert rules is not None and "throughput model" in why
        assert fes.fe["optimal"].launch_rules == rules and fes.fe["thresholds"].launch_rules == {}
        assert all(len(masks) == 2 and all(m >> n & 1 for m in masks[:1]) for n, masks in rules.items())
        outs = {k: fes.run(fe.generate_many(_reqs())) for k, fe in fes.fe.items()}
        assert [r.output_ids for r in outs["optimal"]] == [r.output_ids for r in outs["thresholds"]]
    finally:
        fes.close()


def test_policy_must_be_known() -> None:
    with pytest.raises(UserError, match="runtime.policy"):
        RuntimeConfig(policy="best")
