"""Std. Serving: real single-model `tokenrouter serve` subprocesses driven one token at a time over HTTP by
the external dispatcher; its greedy outputs must equal TokenRouter's (same algorithm, same seeds)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tokenrouter.baselines.std_serving import StdServingOptions, StdServingSystem, from_setup
from tokenrouter.config import AlgorithmSpec, RuntimeConfig, model_specs
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest

TINY = {"members": [{"name": "small", "source": "tiny-random:small"}, {"name": "large", "source": "tiny-random:large"}]}


def _children() -> set[int]:
    me = str(os.getpid())
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == me and fields[0] != "Z":
                out.add(int(entry.name))
    return out


@pytest.mark.slow  # the default suite checks the same equality and cost report in test_handoff_systems.py
def test_greedy_outputs_equal_tokenrouter_and_cost_is_reported() -> None:
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    specs = model_specs(TINY)
    algo = AlgorithmSpec("bernoulli", {"route_prob": 0.35})
    runtime = RuntimeConfig(thresholds=[1, 1])
    prompts = [[5, 9, 12, 40], [7, 7, 30], [11, 50, 51, 52, 53, 54], [20]]
    reqs = [GenerationRequest(p, max_new_tokens=14, seed=100 + i, index=i) for i, p in enumerate(prompts)]
    before = _children()

    async def run() -> tuple[list, list, dict]:
        router = TokenRouterFrontend(specs, algo, runtime)
        std = StdServingSystem(specs, algo, runtime, options=StdServingOptions())
        try:
            await asyncio.gather(router.start(), std.start())  # start-up dominates: overlap it
            expected = await router.generate_many(reqs)
            got = await asyncio.gather(*(std.generate(r) for r in reqs))
            return expected, list(got), std.stats()
        finally:
            await asyncio.gather(router.close(), std.close())

    expected, got, stats = asyncio.run(run())
    assert _children() <= before, "std_serving left server processes behind"
    for e, g in zip(expected, got, strict=True):
        assert g.output_ids == e.output_ids
        assert g.tokens_per_model == e.tokens_per_model and g.handoffs == e.handoffs
        assert g.finish_reason == e.finish_reason
    assert sum(g.handoffs for g in got) > 0 and all(g.first_token_s is not None for g in got)

    small = stats["models"]["small"]
    assert small["steps"] >= small["tokens_committed"] > 0 and small["handoffs_sent"] > 0
    cost = small["per_token_ms"]
    assert cost["dispatch"] >= cost["http_round_trip"] >= cost["server_handling"] > cost["model_step"] > 0
    assert 0 < cost["model_step_share"] < 1
    assert small["server"]["engine_steps"] > 0


def test_config_errors_are_one_line_user_errors() -> None:
    with pytest.raises(UserError, match="server must be one of"):
        StdServingOptions(server="vllm")
    with pytest.raises(UserError, match="return_logits"):
        StdServingOptions(return_logits="sometimes")

    class Setup:
        models = model_specs(TINY)
        algorithm = AlgorithmSpec("bernoulli", {})
        runtime = RuntimeConfig()
        seed = 0
        system = {"name": "std_serving", "prefix_cache_token": 5}

        def unknown_fields(self, known: set[str]) -> None:
            extra = sorted(set(self.system) - known - {"name"})
            if extra:
                raise UserError(f"unknown field(s) {extra}")

    with pytest.raises(UserError, match="prefix_cache_token"):
        from_setup(Setup())
    opts = StdServingOptions()
    assert opts.outputs("bernoulli") == (False, False) and opts.outputs("r2r") == (True, True)
    assert opts.outputs("rstitch") == (True, False)


def test_sglang_server_that_cannot_start_is_a_clear_error_and_leaves_nothing() -> None:
    """An interpreter without SGLang: the server exits at once; start() says so in one error naming the model
    and the log's last lines, and no process or directory is left."""
    import importlib.util
    import sys

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("this interpreter has SGLang")
    before = _children()
    std = StdServingSystem(model_specs(TINY), AlgorithmSpec("bernoulli", {}), RuntimeConfig(),
                           options=StdServingOptions(server="sglang", sglang={"python": sys.executable}))
    with pytest.raises(UserError, match=r"SGLang server for model '(small|large)' exited with code 1: (?s:.*)sglang"):
        asyncio.run(std.start())
    assert std.servers == [] and std._dir is None and _children() <= before
    with pytest.raises(UserError, match="is not a file"):
        asyncio.run(StdServingSystem(model_specs(TINY), AlgorithmSpec("bernoulli", {}), RuntimeConfig(),
                                     options=StdServingOptions(server="sglang", sglang={"python": "/no/python"})).start())
    with pytest.raises(UserError, match="unknown sglang option"):
        StdServingOptions(server="sglang", sglang={"pyhton": "x"})


@pytest.mark.slow
def test_rstitch_through_returned_logits_equals_lockstep() -> None:
    """R-Stitch routes on the servers' returned next-token logits (both sides keep their tokens)."""
    from tokenrouter.baselines.lockstep import LockstepSystem

    specs = model_specs(TINY)
    algo = AlgorithmSpec("rstitch", {"tau": 0.3})
    reqs = [GenerationRequest([5 + i, 9, 12], max_new_tokens=16, seed=i, index=i) for i in range(3)]

    async def run() -> tuple[list, list]:
        async with LockstepSystem(specs, algo, RuntimeConfig()) as ls:
            expected = [await ls.generate(r) for r in reqs]
        async with StdServingSystem(specs, algo, RuntimeConfig(thresholds=[1, 1])) as std:
            assert (std.want_logits, std.want_hidden) == (True, False)
            got = [await std.generate(r) for r in reqs]
        return expected, got

    expected, got = asyncio.run(run())
    assert [g.output_ids for g in got] == [e.output_ids for e in expected]
    assert [g.tokens_per_model for g in got] == [e.tokens_per_model for e in expected]
    assert sum(g.tokens_per_model["large"] for g in got) > 0 and sum(g.handoffs for g in got) > 0


def test_a_server_that_cannot_start_is_a_clear_error_and_leaves_nothing() -> None:
    specs = model_specs({"members": [{"name": "large", "engine": "sim", "sim": {"vocab_size": 2}}]})
    std = StdServingSystem(specs, AlgorithmSpec("stay", {}), RuntimeConfig())
    before = _children()
    with pytest.raises(UserError, match=r"server for model 'large' exited with code 1: .*vocab_size >= 3"):
        asyncio.run(std.start())
    assert _children() <= before and std.servers == [] and std._dir is None


def test_dispatcher_reads_only_the_embedding_and_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """For SGLang servers the dispatcher turns returned hidden states into logits: with the model's own head,
    read as tensors from its safetensors (never the whole model: a 32B model's head is 1.5 GB of 64)."""
    import torch

    from tokenrouter.baselines import std_serving
    from tokenrouter.engine import loader

    for source in ("tiny:small", "tiny-random:large"):
        model = loader.load_model(source, "float32", "cpu")
        hidden = torch.randn(2, model.config.hidden_size)
        spec = model_specs({"members": [{"name": "m", "source": source}]})[0]
        with monkeypatch.context() as m:
            m.setattr(loader, "load_model", lambda *a, **k: pytest.fail("the whole model was loaded"))
            info = std_serving._ModelInfo(spec)
            got, emb = info.logits(hidden), info.input_embeddings()
        assert torch.allclose(got, model.lm_head(hidden).float(), atol=1e-6)
        assert torch.equal(emb.weight, model.get_input_embeddings().weight)


def test_a_bug_in_any_plugin_call_fails_only_its_request_and_blames_the_algorithm() -> None:
    """The dispatcher's plugin calls are guarded (runtime/plugin_guard.py): a raising or nonsensical route(),
    keeps_token(), send() or receive(), a hand-off loop (runtime.max_handoffs_per_token) and a route() past
    runtime.route_timeout_s (checked when it returns) fail their own request with an AlgorithmFailure naming the
    call (an HTTP 500 / an error row in a benchmark, never the client's fault); the others finish."""
    from tokenrouter.api import AlgorithmFailure
    from tokenrouter.config import ModelSpec, SimSpec

    from ..runtime.user_algorithms import misbehaving as bad

    specs = [ModelSpec(name=n, engine="sim", sim=SimSpec(latency_ms=0.0, seed=i)) for i, n in enumerate(("s", "l"))]
    faulty = {**bad.SEEDS, "loop": bad.LOOP}

    async def run() -> list:
        std = StdServingSystem(specs, AlgorithmSpec(bad.__name__, {"route_prob": 0.3}),
                               RuntimeConfig(route_timeout_s=2.0, max_handoffs_per_token=8), options=StdServingOptions())
        await std.start()
        try:
            await std.generate(GenerationRequest([5, 6], max_new_tokens=2, seed=1))  # the first route() is untimed
            results = await asyncio.gather(*(std.generate(GenerationRequest([5, 6, 7], max_new_tokens=12, seed=s,
                                                                            stop_token_ids=[]))
                                             for s in [1, 2, *faulty.values()]), return_exceptions=True)
            # alone: route() runs on the dispatcher's event loop, so a slow one holds every request in flight
            slow = await asyncio.gather(std.generate(GenerationRequest([5], max_new_tokens=2, seed=bad.SLOW)),
                                        return_exceptions=True)
            return [*results, *slow]
        finally:
            await std.close()

    innocent_a, innocent_b, *failed = asyncio.run(run())
    assert len(innocent_a.output_ids) == len(innocent_b.output_ids) == 12
    words = {"route raises": "route() raised FloatingPointError", "float destination": "destination 1.5",
             "destination out of range": "destination 7", "destination count": "2 destinations for 1 requests",
             "keeps_token raises": "keeps_token() raised KeyError",
             "send raises": "send() raised RuntimeError", "receive raises": "receive() raised ValueError",
             "malformed message": "loc is str", "foreign message": "'someone-else'",
             "loop": "handed off 8 times without a committed token", "slow": "route_timeout_s=2 s"}
    for what, exc in zip([*faulty, "slow"], failed, strict=True):
        assert isinstance(exc, AlgorithmFailure), (what, exc)
        assert str(exc).startswith("routing algorithm 'misbehaving' failed on model") and words[what] in str(exc), \
            (what, str(exc))
