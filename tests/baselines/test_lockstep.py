"""Lock-step R2R semantics on our engines: same decisions as TokenRouter, different schedule, so greedy
outputs must be identical; on the sim pair its throughput matches the lock-step prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenrouter.cli import main
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.perfmodel import SystemSpec
from tokenrouter.perfmodel.lockstep import lockstep_throughput
from tokenrouter.perfmodel.presets import preset


def rows(run_dir: Path) -> dict[int, dict]:
    out = {}
    for line in (run_dir / "requests.jsonl").read_text().splitlines():
        row = json.loads(line)
        out[row["index"]] = row
    return out


def test_greedy_outputs_equal_tokenrouter_on_tiny_random(tmp_path: Path) -> None:
    common = ["models=tiny-random", "algorithm=bernoulli", "algorithm.route_prob=0.35", "seed=3",
              "workload.num_requests=6", "workload.output_tokens=24"]
    assert main(["bench", *common, "system=lockstep", "concurrency=3", f"hydra.run.dir={tmp_path / 'ls'}"]) == 0
    assert main(["bench", *common, "system=tokenrouter", "concurrency=2", f"hydra.run.dir={tmp_path / 'tr'}"]) == 0
    lock, router = rows(tmp_path / "ls"), rows(tmp_path / "tr")
    assert sorted(lock) == sorted(router) == list(range(6))
    for i in lock:
        a, b = lock[i], router[i]
        assert a["output_ids"] == b["output_ids"], i
        assert a["finish_reason"] == b["finish_reason"]
        assert a["tokens_per_model"] == b["tokens_per_model"] and a["handoffs"] == b["handoffs"]
        assert a["text"] == b["text"]
    assert sum(r["tokens_per_model"]["large"] for r in lock.values()) > 0  # routing really happened
    assert sum(r["tokens_per_model"]["small"] for r in lock.values()) > 0


def bernoulli_throughput(p: float, small: LatencyProfile, large: LatencyProfile, n: int) -> float:
    return lockstep_throughput(SystemSpec.build(*preset("bernoulli", route_prob=p), [small, large]), n)


def test_bernoulli_prediction() -> None:
    # every round commits N tokens; it costs a small step plus a large step unless no row was routed
    small, large = LatencyProfile.constant(6.0), LatencyProfile.constant(27.9)
    assert bernoulli_throughput(0.0, small, large, 4) == pytest.approx(4000 / 6.0)
    assert bernoulli_throughput(1.0, small, large, 4) == pytest.approx(4000 / 33.9)
    assert bernoulli_throughput(0.35, small, large, 1) == pytest.approx(1000 / (6.0 + 0.35 * 27.9))


def test_models_never_overlap_on_sim(tmp_path: Path) -> None:
    """Lock step means one model at a time: the run lasts at least the sum of all its steps' latencies."""
    assert main(["bench", "models=sim-r2r", "system=lockstep", "concurrency=4", "workload.num_requests=8",
                 "workload.output_tokens=40", f"hydra.run.dir={tmp_path}"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    models = summary["stats"]["models"]
    serial_s = (models["small"]["steps"] * 6.0 + models["large"]["steps"] * 27.9) / 1000
    assert models["small"]["mean_batch_size"] == pytest.approx(4.0, abs=0.5)
    assert serial_s * 0.99 <= summary["elapsed_s"] < serial_s * 3
    assert summary["throughput_tok_s"] <= summary["predicted_throughput_tok_s"] * 1.1


def test_driver_failure_fails_requests_instead_of_hanging() -> None:
    """Fault injection: a bug in the driver thread must surface as errors on every waiting request."""
    import asyncio

    from tokenrouter.baselines.lockstep import LockstepSystem
    from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
    from tokenrouter.generation import GenerationRequest

    specs = [ModelSpec(name="small", engine="sim"), ModelSpec(name="large", engine="sim")]

    async def scenario() -> None:
        system = LockstepSystem(specs, AlgorithmSpec("bernoulli", {"route_prob": 0.5}), RuntimeConfig())
        await system.start()
        try:
            ok = await system.generate(GenerationRequest([5, 6, 7], max_new_tokens=3))
            assert len(ok.output_ids) == 3

            def broken(waiting):
                raise ValueError("injected")

            system._admit = broken  # type: ignore[method-assign]
            with pytest.raises(RuntimeError, match="injected"):
                await asyncio.wait_for(system.generate(GenerationRequest([5, 6], max_new_tokens=3)), 10)
            with pytest.raises(RuntimeError, match="driver failed"):
                await system.generate(GenerationRequest([5], max_new_tokens=1))
        finally:
            await asyncio.wait_for(system.close(), 10)

    asyncio.run(scenario())


def test_close_leaves_no_engine_or_model_alive() -> None:
    """A sweep runs lock-step jobs in one process: after close() nothing of the engines may survive, or the
    next job's models find the GPU memory still held by PyTorch's caching allocator."""
    import asyncio
    import gc
    import weakref

    from tokenrouter.baselines.lockstep import LockstepSystem
    from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
    from tokenrouter.generation import GenerationRequest

    specs = [ModelSpec(name="small", source="tiny-random:small", kv_tokens=2048),
             ModelSpec(name="large", source="tiny-random:large", kv_tokens=2048)]

    async def scenario() -> tuple[list[weakref.ref], object]:
        system = LockstepSystem(specs, AlgorithmSpec("bernoulli", {"route_prob": 0.5}), RuntimeConfig())
        await system.start()
        refs = [weakref.ref(o) for e in system.engines for o in (e, e.model, e.pool.k, e.pool.v)]
        held = system.engines[0]  # as a traceback frame might: its weights and KV must go all the same
        results = await asyncio.gather(*(system.generate(GenerationRequest([5, 6, 7], max_new_tokens=8, index=i))
                                         for i in range(3)))
        assert all(r.error is None and len(r.output_ids) >= 1 for r in results)
        await system.close()
        return refs, held

    refs, held = asyncio.run(scenario())
    gc.collect()
    assert [r for r in refs if r() is not None] == [refs[0]] and refs[0]() is held


@pytest.mark.parametrize("engine", ["sim", "torch"])
def test_admission_control_keeps_every_step_within_a_tiny_kv_pool(engine: str) -> None:
    """Many requests at once, each able to fill a fifth of the pool: admission (the subserver scheduler's
    rule) holds the rest back until KV frees up, so every request finishes and no step fails."""
    import asyncio

    from tokenrouter.baselines.lockstep import LockstepSystem
    from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
    from tokenrouter.generation import GenerationRequest

    n, max_new = (40, 100) if engine == "sim" else (12, 24)
    kv = 5 * (4 + max_new + 16)
    extra = {"sim": SimSpec(latency_ms=0.0)} if engine == "sim" else {"source": "tiny-random:small"}
    specs = [ModelSpec(name="small", engine=engine, kv_tokens=kv, **extra),
             ModelSpec(name="large", engine=engine, kv_tokens=kv,
                       **({**extra, "source": "tiny-random:large"} if engine == "torch" else extra))]

    async def scenario() -> list:
        system = LockstepSystem(specs, AlgorithmSpec("bernoulli", {"route_prob": 0.3}), RuntimeConfig())
        await system.start()
        try:
            stop = [] if engine == "sim" else None
            return await asyncio.gather(*(system.generate(
                GenerationRequest([5, 6, 7, 8], max_new_tokens=max_new, index=i, seed=i, stop_token_ids=stop))
                for i in range(n)))
        finally:
            await system.close()

    results = asyncio.run(scenario())
    assert [r.error for r in results] == [None] * n
    assert all(r.finish_reason in ("length", "stop") for r in results)


def test_a_bug_in_any_plugin_call_fails_only_its_requests() -> None:
    """The routing algorithm's calls are guarded as in the runtime (runtime/plugin_guard.py): a raising route(),
    keeps_token(), send() or receive(), a bad destination or hand-off message fails only its own request, with
    a line blaming the algorithm, while innocent requests in the same batches finish in full; a request handed
    back and forth without a committed token stops at runtime.max_handoffs_per_token; a slow route() fails at
    runtime.route_timeout_s; a step that fails on one request's input steps the others again alone; a BaseException
ends the driver and fails every request. Before, a bad call failed its whole batch ("step failed"), the loop
never ended, and a BaseException left every client waiting."""
    import asyncio

    from tokenrouter.baselines.lockstep import LockstepSystem
    from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
    from tokenrouter.generation import GenerationRequest

    from ..runtime.user_algorithms import misbehaving as bad

    specs = [ModelSpec(name=n, engine="sim", sim=SimSpec(latency_ms=0.0, seed=i)) for i, n in enumerate(("s", "l"))]
    faulty = {**bad.SEEDS, "loop": bad.LOOP}

    async def scenario() -> tuple[list, list]:
        system = LockstepSystem(specs, AlgorithmSpec(bad.__name__, {"route_prob": 0.3}),
                                RuntimeConfig(route_timeout_s=2.0, max_handoffs_per_token=8))
        await system.start()
        try:
            warm = await system.generate(GenerationRequest([5, 6, 7], max_new_tokens=4, seed=1, stop_token_ids=[]))
            assert warm.error is None  # each model's first route() (untimed) is behind us
            seeds = [*range(1, 9), *faulty.values(), bad.BAD_TOKEN]
            results = await asyncio.gather(*(system.generate(GenerationRequest(
                [5, 6, 7, s % 50], max_new_tokens=24, seed=s, index=i, stop_token_ids=[]))
                for i, s in enumerate(seeds)))
            slow = await system.generate(GenerationRequest([5, 6], max_new_tokens=4, seed=bad.SLOW, stop_token_ids=[]))
            # an exception no guard catches (a BaseException) ends the driver: every request fails, none hangs
            for seed in (bad.DEADLY, 1):
                with pytest.raises(RuntimeError, match="lockstep driver failed: Deadly: the router process state"):
                    await asyncio.wait_for(system.generate(GenerationRequest([5], max_new_tokens=2, seed=seed)), 30)
            return results[:8], [*results[8:-1], slow], results[-1]
        finally:
            await system.close()

    innocent, failed, bad_token = asyncio.run(scenario())
    assert [(r.error, len(r.output_ids)) for r in innocent] == [(None, 24)] * 8
    words = {"route raises": "route() raised FloatingPointError", "float destination": "destination 1.5",
             "destination out of range": "destination 7", "destination count": "destinations for 1 requests",
             "keeps_token raises": "keeps_token() raised KeyError", "send raises": "send() raised RuntimeError",
             "receive raises": "receive() raised ValueError", "malformed message": "loc is str",
             "foreign message": "'someone-else'", "loop": "handed off 8 times without a committed token",
             "slow": "route() ran past runtime.route_timeout_s=2 s"}
    for (what, _), result in zip([*faulty.items(), ("slow", bad.SLOW)], failed, strict=True):
        assert result.finish_reason == "error" and result.error.startswith("routing algorithm"), (what, result.error)
        assert words[what] in result.error, (what, result.error)
    # the peer's step fails on the token (the request's fault, not the algorithm's): stepped alone, it fails alone
    assert bad_token.error.startswith("model 'l' step failed: ValueError: sim model 'l': token id 1000000"), \
        bad_token.error
