"""A new user algorithm that declares what it needs (`Needs`: the step's logits only, routing rates measured;
user_algorithms/declared.py + declared.yaml) works with `thresholds=auto` (planned, then re-planned at the
measured rate) and gives the same greedy outputs on the TokenRouter runtime, lock-step and Std. Serving,
each of which hands route() the logits and no hidden state (route() fails the step otherwise)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import yaml

from tokenrouter.algorithms import algorithm_class
from tokenrouter.baselines.lockstep import LockstepSystem
from tokenrouter.baselines.std_serving import StdServingSystem
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.runtime import threshold_planner
from tokenrouter.runtime.frontend import TokenRouterFrontend
from tokenrouter.runtime.threshold_planner import rates_are_measured

from .conftest import generate_on_each, started, user_algorithms_importable

HERE = Path(__file__).parent
ALGORITHM = AlgorithmSpec.from_dict(yaml.safe_load((HERE / "user_algorithms" / "declared.yaml").read_text()))


def _profile(path: Path, decode_ms: dict[int, float]) -> str:
    path.write_text(json.dumps({"decode_ms": {str(b): ms for b, ms in decode_ms.items()}, "extend_ms_per_token": 0.01}))
    return str(path)


def _specs(tmp_path: Path) -> list[ModelSpec]:
    return [ModelSpec(name="small", source="tiny-random:small", kv_tokens=4096,
                      latency_profile=_profile(tmp_path / "small.json", {1: 2.0, 4: 2.2, 16: 3.0})),
            ModelSpec(name="large", source="tiny-random:large", kv_tokens=4096,
                      latency_profile=_profile(tmp_path / "large.json", {1: 10.0, 4: 10.5, 16: 13.0}))]


def test_declared_algorithm_runs_with_auto_thresholds_and_on_std_serving(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(threshold_planner, "RETUNE_AT", (100,))
    monkeypatch.setattr(threshold_planner, "RETUNE_POLL_S", 0.05)
    monkeypatch.syspath_prepend(str(HERE))  # the planner child and the dispatcher import the algorithm too
    specs = _specs(tmp_path)
    reqs = [GenerationRequest([4 + i, 9, 30 + i, 2 * i + 5], max_new_tokens=16, seed=i, index=i) for i in range(12)]
    assert algorithm_class(ALGORITHM.name).needs.step_outputs == {"logits"}
    assert rates_are_measured(ALGORITHM)

    async def run() -> tuple[list[list[GenerationResult]], str, tuple[bool, bool]]:
        router = TokenRouterFrontend(specs, ALGORITHM, RuntimeConfig(thresholds="auto", max_wait_ms=5.0))
        lockstep = LockstepSystem(specs, ALGORITHM, RuntimeConfig())
        std = StdServingSystem(specs, ALGORITHM, RuntimeConfig(thresholds=[1, 1]))
        systems = (router, lockstep, std)
        async with started(*systems):
            results = await generate_on_each(systems, reqs, 300)
            for _ in range(600):  # the re-plan runs in a child process: seconds on a loaded machine
                if "measured over" in router.stats()["thresholds_source"]:
                    break
                await asyncio.sleep(0.1)
            return results, router.stats()["thresholds_source"], (std.want_logits, std.want_hidden)

    with user_algorithms_importable():
        results, source, std_outputs = asyncio.run(run())
    assert std_outputs == (True, False)  # Std. Serving asks its servers for what the algorithm declared
    assert "measured over" in source and "bernoulli" in source, source
    views = [[(r.output_ids, r.finish_reason, r.tokens_per_model, r.handoffs) for r in rs] for rs in results]
    assert views[1] == views[0], "lock-step differs from the TokenRouter runtime"
    assert views[2] == views[0], "Std. Serving differs from the TokenRouter runtime"
    assert sum(r.handoffs for r in results[0]) >= 10
