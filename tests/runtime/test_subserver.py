"""One subserver's loop pieces in-process (sim engine, real zmq sockets): a hand-off that overtakes the front
end's Peers message (it travels on another connection) is answered once Peers arrives, not lost or fatal; a
request waiting for KV runs as soon as a finish frees it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import zmq

from tokenrouter.algorithms import build_algorithm
from tokenrouter.api import PeerRequest
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.engine.base import SamplingParams
from tokenrouter.engine.sim import SimEngine
from tokenrouter.errors import UserError
from tokenrouter.runtime.ipc import PushLink, bind_inbox, connect_outbox
from tokenrouter.runtime.messages import PeerMessage, Peers, RequestMeta, Submit, decode, encode
from tokenrouter.runtime.subserver import IDLE_POLL_MS, Subserver, SubserverConfig

MODELS = [ModelSpec(name="small", engine="sim", sim=SimSpec(latency_ms=0.1, seed=1)),
          ModelSpec(name="large", engine="sim", sim=SimSpec(latency_ms=0.1, seed=2))]


@contextmanager
def one_model(tmp_path, spec: ModelSpec | None = None, runtime: RuntimeConfig | None = None,
              loopback: bool = False) -> Iterator[tuple[Subserver, zmq.Socket]]:
    """A one-model subserver running `stay` over real zmq sockets, and its inbox; with `loopback` its reports go
    to its own inbox (a stand-in front end that sends it frames)."""
    ctx = zmq.Context()
    spec = spec or ModelSpec(name="m", engine="sim", sim=SimSpec(latency_ms=0.0, seed=1))
    frontend_inbox, frontend_endpoint = bind_inbox(ctx, "ipc", str(tmp_path), "frontend")
    inbox, endpoint = bind_inbox(ctx, "ipc", str(tmp_path), spec.name)
    cfg = SubserverConfig(0, [spec], AlgorithmSpec("stay"), runtime or RuntimeConfig(thresholds=[1]),
                          frontend_endpoint, str(tmp_path))
    sub = Subserver(cfg, SimEngine.from_spec(spec), build_algorithm("stay", 0, [spec.name], {}), ctx, inbox,
                    PushLink(connect_outbox(ctx, endpoint if loopback else frontend_endpoint)))
    try:
        yield sub, inbox
    finally:
        for sock in (frontend_inbox, inbox):
            sock.close(linger=0)
        sub.io.to_frontend.close()
        ctx.term()


def test_reply_to_a_peer_waits_for_its_endpoint(tmp_path) -> None:
    ctx = zmq.Context()
    small_inbox, small_endpoint = bind_inbox(ctx, "ipc", str(tmp_path), "small")
    frontend_inbox, frontend_endpoint = bind_inbox(ctx, "ipc", str(tmp_path), "frontend")
    inbox, _ = bind_inbox(ctx, "ipc", str(tmp_path), "large")
    cfg = SubserverConfig(1, MODELS, AlgorithmSpec("bernoulli", {"route_prob": 1.0}), RuntimeConfig(thresholds=[1, 1]),
                          frontend_endpoint, str(tmp_path))
    algo = build_algorithm("bernoulli", 1, ["small", "large"], {"route_prob": 1.0})
    sub = Subserver(cfg, SimEngine.from_spec(MODELS[1]), algo, ctx, inbox,
                    PushLink(connect_outbox(ctx, frontend_endpoint)))
    try:
        meta = RequestMeta(8, SamplingParams(), 7, [])
        sub.handle(PeerMessage(PeerRequest("r", 0, [5, 6, 7], 3), sender=0, handoffs=1, meta=meta))
        batch = sub.sched.next_batch(time.perf_counter())
        sub.run_batch(batch)  # the large model commits one token and hands the request back to model 0
        sub.report(time.perf_counter())  # ... whose endpoint it does not know yet
        assert 0 in sub.io.outbox and not small_inbox.poll(100)
        sub.handle(Peers([small_endpoint, "unused"]))
        sub.report(time.perf_counter())
        assert small_inbox.poll(30_000)  # a bound on a hang only: the zmq I/O thread connects and delivers
        [reply] = decode(small_inbox.recv())
        assert isinstance(reply, PeerMessage) and reply.msg.rid == "r" and reply.sender == 1
    finally:
        for sock in (small_inbox, frontend_inbox, inbox):
            sock.close(linger=0)
        for link in (*sub.io.peers.values(), sub.io.to_frontend):
            link.close()
        ctx.term()


def test_a_request_waiting_for_kv_steps_right_after_the_finish_that_frees_it(tmp_path) -> None:
    """The loop polls without waiting after a step that leaves a request waiting for KV: the finish in that
    step may have freed its reservation (else it would sit out a stats or idle timer)."""
    spec = ModelSpec(name="m", engine="sim", kv_tokens=30, page_size=4, sim=SimSpec(latency_ms=0.0, seed=1))
    with one_model(tmp_path, spec) as (sub, _):
        engine = sub.engine
        sub.io.listen()
        for rid in ("a", "b"):  # each reserves prompt 3 + 16 new + a page of 4 = 23 of the 30 tokens
            sub.handle(Submit(rid, [5, 6, 7], RequestMeta(16, SamplingParams(), 7, [])))
        assert sub.sched.occupancy()["waiting"] == 1
        for _ in range(16):  # "a" decodes to its last token
            sub.iterate(block=False)
        assert "a" not in sub.sched.entries and engine.seq_len("b") == 0
        assert sub.sched.has_work and sub.timeout_ms(ran=True) == 0
        sub.iterate(block=False)
        assert engine.seq_len("b") == 3  # admitted and prefilled in the very next iteration


def test_a_contended_spin_pauses_spinning(tmp_path, monkeypatch) -> None:
    """runtime.spin_us: a spin during which this thread got (almost) no CPU was taking a core another process
    wanted; the next spins return at once, without polling, until the back-off is over."""
    import tokenrouter.runtime.subserver_io as io_module

    # 50 ms spins: long enough that a loaded machine's descheduling cannot end one before its first poll
    with one_model(tmp_path, runtime=RuntimeConfig(thresholds=[1], spin_us=50_000)) as (sub, _):
        io = sub.io
        polls = []
        real_poll = io.poll
        io.poll = lambda timeout_ms: polls.append(timeout_ms) or real_poll(timeout_ms)
        io.listen()
        io.receive()  # reading ZMQ_EVENTS clears the inbox descriptor's start-up signal
        monkeypatch.setattr(io_module.time, "thread_time", time.perf_counter)  # as if it had the CPU
        # a back-off far longer than this test: the checks below are not raced by a descheduled test process
        monkeypatch.setattr(io_module, "SPIN_BACKOFF_S", 60.0)
        t0 = time.perf_counter()
        assert not io.spin() and polls  # nothing arrived: it spun the whole 50 ms, polling
        assert time.perf_counter() - t0 >= 0.05 and io.spin_off_until == 0.0  # uncontended: no back-off
        frozen = time.thread_time()
        monkeypatch.setattr(io_module.time, "thread_time", lambda: frozen)  # as if descheduled throughout
        assert not io.spin()
        assert io.spin_off_until > time.perf_counter()
        polls.clear()
        assert not io.spin() and not polls  # backing off: no spinning at all
        monkeypatch.undo()
        io.spin_off_until = time.perf_counter()  # the back-off is over
        assert not io.spin() and polls


def test_a_frame_behind_a_consumed_inbox_signal_is_read_after_the_idle_timeout(tmp_path) -> None:
    """The zmq inbox is polled through its ZMQ_FD, which signals edges: should a signal ever be consumed without
    the frame behind it being read, the first quiet poll timeout makes the next receive look at every source."""
    with one_model(tmp_path, loopback=True) as (sub, inbox):  # its own inbox stands in for the front end's
        sub.io.listen()
        sub.io.receive()
        sub.io.to_frontend.send(encode([Submit("r", [5, 6, 7], RequestMeta(4, SamplingParams(), 7, []))]))
        deadline = time.perf_counter() + 5
        while not inbox.getsockopt(zmq.EVENTS) & zmq.POLLIN:  # the frame is there; this read took the signal
            assert time.perf_counter() < deadline
        sub.io.events = set()  # as if the last poll had reported nothing
        start = time.perf_counter()
        sub.iterate()  # nothing to read by the poll's account: it waits out the idle timeout
        assert "r" not in sub.sched.entries and time.perf_counter() - start >= IDLE_POLL_MS / 1000 * 0.9
        sub.iterate()
        assert "r" in sub.sched.entries or sub.counters.committed > 0


def test_a_route_to_a_model_that_does_not_exist_fails_only_that_request(tmp_path) -> None:
    """route() returning a destination outside the models fails the request it was for (the algorithm's fault),
    with a line naming the destination; its batch mate steps again alone and goes on."""
    with one_model(tmp_path) as (sub, _):
        sub.algo.route = lambda step: [5 if r.seed == 13 else 0 for r in step.requests]
        for rid, seed in (("bad", 13), ("good", 7)):
            sub.handle(Submit(rid, [5, 6, 7], RequestMeta(4, SamplingParams(), seed, [])))
        batch = sub.sched.next_batch(time.perf_counter())
        assert len(batch) == 2
        sub.run_batch(batch)
        [(rid, error)] = sub.io.report.algorithm_failures
        assert rid == "bad" and "returned destination 5 (1 models)" in error and not sub.io.report.failures
        assert "bad" not in sub.sched.entries and sub.engine.seq_len("bad") == 0
        assert sub.counters.committed == 1 and sub.engine.seq_len("good") == 3  # stepped alone, committed, ready


def test_subserver_config_crosses_typed_and_a_malformed_one_is_one_line() -> None:
    """What the front end encodes (children.spawn) the subserver decodes once into the same types, equal to the
    parent's objects; a blob that is not a SubserverConfig is one line on stderr and exit status 1."""
    import subprocess
    import sys

    import msgspec

    from tokenrouter.children import child_env, decode_config
    from tokenrouter.config import Footprint
    from tokenrouter.runtime.ipc import CurveKeys

    models = [MODELS[0], ModelSpec(name="large", source="tiny-random:large", tp=2, latency_profile="auto",
                                   footprint=Footprint(10, 2, 8, 2, 16))]
    cfg = SubserverConfig(1, models, AlgorithmSpec("bernoulli", {"route_prob": 0.5, "nested": {"a": [1, 2]}}),
                          RuntimeConfig(thresholds=[[1, 1], [1, 2]], policy="optimal", max_wait_ms=7.5),
                          "ipc:///x/frontend", "/x", CurveKeys("pub", "sec"), startup_profile=True)
    back = decode_config(msgspec.msgpack.encode(cfg), SubserverConfig)
    assert back == cfg
    assert isinstance(back.spec, ModelSpec) and back.spec.tp == 2 and isinstance(back.spec.footprint, Footprint)
    assert isinstance(back.runtime, RuntimeConfig) and back.runtime.max_wait_ms == 7.5
    assert isinstance(back.keys, CurveKeys) and isinstance(back.algorithm, AlgorithmSpec)
    bad_runtime = msgspec.msgpack.encode({**msgspec.to_builtins(cfg), "runtime": {"max_wait_ms": -1}})
    with pytest.raises(UserError, match=r"^malformed SubserverConfig on stdin .*runtime.max_wait_ms must be"):
        decode_config(bad_runtime, SubserverConfig)
    proc = subprocess.run([sys.executable, "-m", "tokenrouter.runtime.subserver"], input=b"not msgpack",
                          capture_output=True, env=child_env(), timeout=60)
    err = proc.stderr.decode().strip()
    assert proc.returncode == 1 and len(err.splitlines()) == 1 and "malformed SubserverConfig on stdin" in err
