"""An engine in a process of its own (engine/remote.py): the same tokens, KV state and errors as in-process,
and a host that dies is an EngineFailure; lock-step's peers there give the same outputs (issue 44 A)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import torch

from tokenrouter.baselines.lockstep import LockstepSystem, own_processes
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.engine.base import EngineFailure, StepItem
from tokenrouter.engine.factory import build_engine
from tokenrouter.engine.remote import RemoteEngine
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest

SMALL = ModelSpec(name="small", source="tiny-random:small", kv_tokens=2048)
LARGE = ModelSpec(name="large", source="tiny-random:large", kv_tokens=2048)


def test_remote_engine_steps_as_the_engine_itself() -> None:
    local, remote = build_engine(LARGE), RemoteEngine(LARGE)
    try:
        assert (remote.vocab_size, remote.hidden_size, remote.eos_token_ids) == (
            local.vocab_size, local.hidden_size, local.eos_token_ids)
        items = [StepItem("a", [5, 6, 7, 8]), StepItem("b", [9, 10])]
        want, got = local.step(items), remote.step(items)
        assert got.next_tokens == want.next_tokens and got.rids == ["a", "b"]
        assert torch.allclose(got.logits, want.logits.float()) and torch.allclose(got.hidden, want.hidden.float())
        assert remote.step([StepItem("a", [11])], frozenset()).logits is None  # only what is asked crosses
        assert remote.seq_len("a") == 5 and remote.tokens_used() > 0
        remote.truncate("a", 2)
        assert remote.seq_len("a") == 2
        remote.release("a")
        assert remote.seq_len("a") == 0 and remote.input_embeddings().weight.shape == (local.vocab_size,
                                                                                       local.hidden_size)
        with pytest.raises(ValueError, match="at most once"):  # a malformed step: the caller's error, as local
            remote.step([StepItem("c", [1]), StepItem("c", [2])])
        assert remote.seq_len("b") == 2  # the host is fine after it
    finally:
        local.close()
        remote.close()


def test_a_dead_host_is_an_engine_failure() -> None:
    remote = RemoteEngine(LARGE)
    try:
        os.kill(remote._proc.pid, signal.SIGKILL)
        remote._proc.wait()
        with pytest.raises(EngineFailure, match="its engine process exited"):
            remote.step([StepItem("a", [5])])
    finally:
        remote.close()


def test_a_host_that_cannot_build_says_why() -> None:
    with pytest.raises(UserError, match="unknown tiny-random model .nope."):
        RemoteEngine(ModelSpec(name="x", source="tiny-random:nope"))


def test_peer_placement() -> None:
    sglang = [ModelSpec(name=n, source="s", engine="sglang") for n in ("small", "large", "xl")]
    assert own_processes(sglang) == [False, True, True]
    assert own_processes([SMALL, LARGE]) == [False, False]
    assert own_processes([SMALL, LARGE], "own") == [False, True]
    with pytest.raises(UserError, match="engine_processes"):
        own_processes([SMALL, LARGE], "both")


def _lockstep_outputs(mode: str) -> list[list[int]]:
    async def go() -> list[list[int]]:
        system = LockstepSystem([SMALL, LARGE], AlgorithmSpec("bernoulli", {"route_prob": 0.4}),
                                RuntimeConfig(), engine_processes=mode)
        async with system:
            reqs = [GenerationRequest(prompt_ids=[4 + i, 5, 6], max_new_tokens=12, seed=i, index=i) for i in range(3)]
            results = await asyncio.gather(*(system.generate(r) for r in reqs))
        assert sum(r.handoffs for r in results) > 0
        return [r.output_ids for r in results]

    return asyncio.run(go())


def test_lockstep_with_peers_in_their_own_processes_gives_the_same_tokens() -> None:
    assert _lockstep_outputs("own") == _lockstep_outputs("shared")


def test_lockstep_whose_peer_process_dies_fails_every_request_and_serves_no_more() -> None:
    """A dead engine cannot serve any request: the lock-step driver stops (as a subserver does on EngineFailure)
    and every request in flight, queued or later fails with one line, instead of being stepped again alone."""
    sim = [ModelSpec(name=n, engine="sim", sim=SimSpec(latency_ms=1.0, seed=i)) for i, n in enumerate(("s", "l"))]

    async def go() -> tuple[list, str]:
        system = LockstepSystem(sim, AlgorithmSpec("bernoulli", {"route_prob": 0.5}), RuntimeConfig(),
                                engine_processes="own")
        async with system:
            peer = system.engines[1]
            assert isinstance(peer, RemoteEngine)
            peer._proc.kill()  # type: ignore[union-attr]
            results = await asyncio.wait_for(asyncio.gather(*(system.generate(GenerationRequest(
                [5, 6, 7], max_new_tokens=40, seed=i, stop_token_ids=[])) for i in range(4)), return_exceptions=True),
                60)
            later = await asyncio.gather(system.generate(GenerationRequest([5], max_new_tokens=2)),
                                         return_exceptions=True)
        return results, str(later[0])

    results, later = asyncio.run(go())
    assert all(isinstance(r, RuntimeError) and "lockstep driver failed: EngineFailure: model 'l'" in str(r)
               for r in results), results
    assert "lockstep driver failed: EngineFailure" in later
