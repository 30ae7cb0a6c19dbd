"""Hostile requests against the runtime (real subserver processes on sim engines): a request that makes a
step fail fails alone, and a request rejected at any stage of admission leaves no trace in the accounting."""

from __future__ import annotations

import asyncio
import time

import msgpack
import pytest
import zmq

from tokenrouter.api import AlgorithmFailure
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.engine.base import SamplingParams
from tokenrouter.generation import GenerationRequest
from tokenrouter.runtime import frontend as frontend_module
from tokenrouter.runtime.frontend import RequestError, RuntimeFailure

from .conftest import Frontends, user_algorithms_importable
from .user_algorithms.poisoned import POISON_SEED

SMALL = ModelSpec(name="small", engine="sim", kv_tokens=4096, sim=SimSpec(latency_ms=1.0, seed=11, vocab_size=500))
LARGE = ModelSpec(name="large", engine="sim", kv_tokens=512, sim=SimSpec(latency_ms=2.0, seed=22, vocab_size=500))
# B_0 = 4 (clipped to feasible at small N): the small model batches the poisoned request with innocent ones
RT = RuntimeConfig(thresholds=[4, 1], max_wait_ms=50.0)


@pytest.fixture(scope="module")
def fes():
    with user_algorithms_importable():
        f = Frontends({
            "poisoned": ([SMALL, LARGE], AlgorithmSpec("user_algorithms.poisoned", {"route_prob": 0.35}), RT),
            "plain": ([SMALL, LARGE], AlgorithmSpec("bernoulli", {"route_prob": 0.35}), RT),
        })
    yield f
    f.close()


def _reqs(seeds: list[int]) -> list[GenerationRequest]:
    return [GenerationRequest([5, 6, 7, s % 400], max_new_tokens=24, seed=s, index=s) for s in seeds]


def test_a_request_that_fails_every_step_it_joins_fails_alone(fes) -> None:
    fe = fes.fe["poisoned"]
    innocent = [1, 2, 3, 4, 5, 6, 7]

    async def both() -> tuple[list, list]:
        mixed = await asyncio.gather(*(fe.generate(r) for r in _reqs([*innocent[:3], POISON_SEED, *innocent[3:]])),
                                     return_exceptions=True)
        alone = await fe.generate_many(_reqs(innocent))
        return mixed, alone

    mixed, alone = fes.run(both())
    poisoned = mixed.pop(3)  # the router's fault, not the request's: an AlgorithmFailure (HTTP 500), no RequestError
    assert isinstance(poisoned, AlgorithmFailure) and not isinstance(poisoned, RequestError), poisoned
    assert "route() raised FloatingPointError: router input is NaN" in str(poisoned)
    assert all(not isinstance(r, BaseException) for r in mixed), mixed
    assert [r.output_ids for r in mixed] == [r.output_ids for r in alone]  # untouched by their batch mate
    assert fe.stats()["active_requests"] == 0
    steps = fes.run(fe.refresh_stats())["models"]["small"]
    assert steps["mean_batch_size"] > 1.0  # the poisoned request really shared batches


BAD = [
    ("seed", GenerationRequest([1, 2], 8, seed=2**63), "seed must be a 64-bit"),
    ("negative seed", GenerationRequest([1, 2], 8, seed=-(2**63) - 1), "seed must be a 64-bit"),
    ("sampling seed", GenerationRequest([1, 2], 8, SamplingParams(0.5, seed=2**70)), "sampling seed"),
    ("top_k", GenerationRequest([1, 2], 8, SamplingParams(0.5, top_k=2**64)), "top_k"),
    ("max_new_tokens", GenerationRequest([1, 2], 2**64), "max_new_tokens"),
    ("stop id", GenerationRequest([1, 2], 8, stop_token_ids=[2**64]), "stop token id"),
    ("prompt id", GenerationRequest([1, 2**64], 8), "outside the vocabulary"),
    ("temperature", GenerationRequest([1, 2], 8, SamplingParams(float("nan"))), "temperature"),
    ("too long for the large model's KV", GenerationRequest([1] * 600, 8, seed=1), "large"),
]


@pytest.mark.parametrize(("what", "req", "message"), BAD, ids=[b[0] for b in BAD])
def test_rejected_request_leaves_no_trace(fes, what: str, req: GenerationRequest, message: str) -> None:
    fe = fes.fe["plain"]
    before = fe.stats()["thresholds"]
    with pytest.raises(RequestError, match=message):
        fes.run(fe.generate(req))
    assert fe.stats()["active_requests"] == 0 and fe.stats()["thresholds"] == before
    ok = fes.run(fe.generate(_reqs([9])[0]))
    assert len(ok.output_ids) > 0


class _BrokenSocket:
    def send(self, frame: bytes, flags: int = 0) -> None:
        raise zmq.ZMQError(zmq.EAGAIN, "injected")


def test_failure_at_encode_or_send_undoes_the_admission(fes, monkeypatch) -> None:
    fe = fes.fe["plain"]

    def no_encode(msgs):
        raise OverflowError("injected")

    with monkeypatch.context() as m:
        m.setattr(frontend_module, "encode", no_encode)
        with pytest.raises(RequestError, match="cannot be encoded"):
            fes.run(fe.generate(_reqs([3])[0]))
    assert fe.stats()["active_requests"] == 0
    real = fe.subservers.outboxes[0]
    fe.subservers.outboxes[0] = _BrokenSocket()
    try:
        with pytest.raises(RuntimeFailure, match="cannot submit"):
            fes.run(fe.generate(_reqs([3])[0]))
    finally:
        fe.subservers.outboxes[0] = real
    assert fe.stats()["active_requests"] == 0
    results = fes.run(fe.generate_many(_reqs([3, 4])))
    assert all(r.finish_reason == "length" for r in results)


def _endpoints(fe) -> list[str]:
    return [fe.subservers.inbox.getsockopt(zmq.LAST_ENDPOINT).decode(), *(r.endpoint for r in fe.subservers.ready)]


def _inject(endpoint: str, frames: list[bytes], keys=None) -> None:
    """Connect from a foreign socket (no keys, or a key pair of its own) and push frames."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    if keys is not None:
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = keys
    sock.connect(endpoint)
    for f in frames:
        sock.send(f)
    time.sleep(0.3)
    # ipc: the frames must get out (the test counts them), however late the I/O thread runs; tcp: CURVE never
    # lets them out, nothing to wait for
    sock.close(linger=30_000 if endpoint.startswith("ipc://") else 0)
    ctx.term()


GARBAGE = [b"\x00\xff garbage", msgpack.packb([[99, 1, 2]]), msgpack.packb([[1, "x", "not-ids", [1]]]),
           msgpack.packb({"a": 1})]


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_foreign_frames_never_kill_a_process_and_tcp_admits_only_the_run_key(transport: str, capfd) -> None:
    rt = RuntimeConfig(thresholds=[1, 1], ipc=transport)
    f = Frontends({"fe": ([SMALL, LARGE], AlgorithmSpec("bernoulli", {"route_prob": 0.35}), rt)})
    try:
        fe = f.fe["fe"]
        server_key = None
        for endpoint in _endpoints(fe):
            _inject(endpoint, GARBAGE)
            if transport == "tcp":  # a client that knows the server key but not the run's key pair
                server_key = fe.subservers.keys.public.encode()
                public, secret = zmq.curve_keypair()
                _inject(endpoint, GARBAGE, (public, secret, server_key))
        results = f.run(fe.generate_many(_reqs([1, 2, 3])))
        assert [r.finish_reason for r in results] == ["length"] * 3
        assert all(p.poll() is None for p in fe.subservers.procs) and fe.health_problem() is None
    finally:
        f.close()
    err = capfd.readouterr().err
    if transport == "ipc":  # same-user sockets in the 0700 dir: frames arrive, are dropped and logged
        assert err.count("dropped a") >= 2 * len(GARBAGE) - 2, err
    else:  # CURVE: not a single foreign frame got through
        assert "dropped a" not in err, err
