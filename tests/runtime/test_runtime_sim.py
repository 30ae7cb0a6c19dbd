"""The runtime end to end on sim engines (real processes and sockets): hand-offs are exact, deterministic,
and the single-model path works. Sim tokens are a function of (seed, prefix), like a real greedy model."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tokenrouter.algorithms import build_algorithm
from tokenrouter.api import RouterRequest
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.engine.base import StepItem
from tokenrouter.engine.sim import SimEngine
from tokenrouter.generation import GenerationRequest
from tokenrouter.runtime.frontend import RequestError
from tokenrouter.runtime.threshold_planner import auto_table, rates_are_measured

from .conftest import Frontends, greedy_reference

SMALL = ModelSpec(name="small", engine="sim", kv_tokens=4096, sim=SimSpec(latency_ms=0.3, seed=11, vocab_size=500))
LARGE = ModelSpec(name="large", engine="sim", kv_tokens=4096, sim=SimSpec(latency_ms=0.9, seed=22, vocab_size=500))
LARGE_300 = ModelSpec(name="large", engine="sim", kv_tokens=300, sim=LARGE.sim)  # fails long requests at hand-off
MID = ModelSpec(name="mid", engine="sim", kv_tokens=4096, sim=SimSpec(latency_ms=0.6, seed=33, vocab_size=500))
ENSEMBLE = AlgorithmSpec("ensemble", {"weights": [0.5, 0.3, 0.2]})
RT = RuntimeConfig(thresholds=[1, 2], max_wait_ms=20.0)
AUTO = RuntimeConfig(thresholds="auto", auto_max_concurrency=6, max_wait_ms=20.0)
PROMPTS = [[3, 4, 5], [9] * 17, [100, 200, 300, 400, 7], [42], [1, 2, 3, 4, 5, 6, 7, 8], [77, 78]]
NEW = 24


def _reqs(max_new: int = NEW) -> list[GenerationRequest]:
    return [GenerationRequest(p, max_new_tokens=max_new, seed=i, index=i) for i, p in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def fes():
    f = Frontends({
        "p0": ([SMALL, LARGE], AlgorithmSpec("bernoulli", {"route_prob": 0.0}), RT),
        "p1": ([SMALL, LARGE_300], AlgorithmSpec("bernoulli", {"route_prob": 1.0}), RT),
        "p35": ([SMALL, LARGE], AlgorithmSpec("bernoulli", {"route_prob": 0.35}), AUTO),
        "single": ([LARGE], AlgorithmSpec("stay"), RuntimeConfig()),
        "ens3": ([SMALL, MID, LARGE], ENSEMBLE, RuntimeConfig(thresholds=[1, 2, 2], max_wait_ms=20.0)),
        "ens3_direct": ([SMALL, MID, LARGE], ENSEMBLE, RuntimeConfig(thresholds=[1, 2, 2], max_wait_ms=20.0,
                                                                      peer_link="direct", spin_us=300.0)),
    })
    yield f
    f.close()


def _reference(spec: ModelSpec, max_new: int = NEW) -> list[list[int]]:
    engine = SimEngine.from_spec(spec)
    return [greedy_reference(engine, p, max_new) for p in PROMPTS]


def test_route_prob_0_equals_small_models_own_output(fes) -> None:
    results = fes.run(fes.fe["p0"].generate_many(_reqs()))
    assert [r.output_ids for r in results] == _reference(SMALL)
    for r in results:
        assert r.tokens_per_model == {"small": NEW, "large": 0} and r.handoffs == 0
        assert r.finish_reason == "length" and r.arrival_s <= r.first_token_s <= r.finish_s


def test_route_prob_1_equals_large_models_own_output(fes) -> None:
    """Every token goes small -> large (drop) -> back: exact only if every extend catches the KV up."""
    results = fes.run(fes.fe["p1"].generate_many(_reqs()))
    assert [r.output_ids for r in results] == _reference(LARGE)
    for r in results:
        assert r.tokens_per_model == {"small": 0, "large": NEW}
        assert r.handoffs == 2 * NEW - 1  # the last token finishes on the large model


def test_queue_wait_shows_what_delayed_batching_costs() -> None:
    # N=2, large threshold 2, bernoulli p=0.1 seeded so that request A (seed 0) hands off at output positions
    # 3, 6, 8, 10 and request B (seed 4) at none below 16: A's first visit to the large model finds no
    # partner within ~12 small steps of 2 ms, so it waits out max_wait (20 ms); the small model (threshold 1)
    # never holds a ready request back longer than one of its own steps
    small = ModelSpec(name="small", engine="sim", sim=SimSpec(latency_ms=2.0, seed=11, vocab_size=500))
    f = Frontends({"p": ([small, LARGE], AlgorithmSpec("bernoulli", {"route_prob": 0.1}), RT)})
    try:
        reqs = [GenerationRequest([5, 6], max_new_tokens=12, seed=0), GenerationRequest([7], 40, seed=4)]
        results = f.run(f.fe["p"].generate_many(reqs))
        stats = f.run(f.fe["p"].refresh_stats())["models"]
    finally:
        f.close()
    assert results[0].tokens_per_model["large"] == 4
    large = stats["large"]
    request_steps = large["steps"] * large["mean_batch_size"]
    total_wait_ms = large["mean_queue_wait_ms"] * request_steps
    assert 19.0 <= total_wait_ms <= request_steps * 22.0  # A's first visit alone waits out the 20 ms
    assert stats["small"]["mean_queue_wait_ms"] < 2.5


def test_mixed_routing_is_identical_across_runs_and_concurrency(fes) -> None:
    fe = fes.fe["p35"]
    together = fes.run(fe.generate_many(_reqs()))
    one_by_one = [fes.run(fe.generate(r)) for r in _reqs()]
    assert [r.output_ids for r in together] == [r.output_ids for r in one_by_one]
    assert [r.tokens_per_model for r in together] == [r.tokens_per_model for r in one_by_one]
    assert together[0].output_ids != _reference(SMALL)[0] != _reference(LARGE)[0]
    share = sum(r.tokens_per_model["large"] for r in together) / (NEW * len(PROMPTS))
    assert 0.15 < share < 0.45
    stats = fes.run(fe.refresh_stats())["models"]
    small = stats["small"]
    assert small["steps"] > 0 and small["route_counts"]["large"] == small["handoffs_sent"] > 0
    assert stats["large"]["route_rates"] == {"small": 1.0, "large": 0.0}
    assert stats["large"]["tokens_committed"] == stats["small"]["handoffs_sent"]  # one token per visit


def test_direct_links_give_the_zmq_links_outputs(fes) -> None:
    """runtime.peer_link=direct (AF_UNIX links for every runtime hop) is a transport and spin_us a way of
    waiting, neither a behaviour."""
    zmq_path = fes.run(fes.fe["ens3"].generate_many(_reqs()))
    direct = fes.run(fes.fe["ens3_direct"].generate_many(_reqs()))
    assert [(r.output_ids, r.tokens_per_model, r.handoffs) for r in direct] == \
        [(r.output_ids, r.tokens_per_model, r.handoffs) for r in zmq_path]
    assert sum(r.handoffs for r in direct) > 0
    streamed = []

    async def stream() -> None:
        async for ev in fes.fe["ens3_direct"].stream(_reqs()[1]):
            streamed.extend(ev.token_ids)

    fes.run(stream())
    assert streamed == zmq_path[1].output_ids


def test_single_model_serving_with_stay(fes) -> None:
    results = fes.run(fes.fe["single"].generate_many(_reqs()))
    assert [r.output_ids for r in results] == _reference(LARGE)
    assert all(r.tokens_per_model == {"large": NEW} and r.handoffs == 0 for r in results)


def test_stream_delivers_every_token_once_in_order(fes) -> None:
    fe = fes.fe["p35"]

    async def consume(req: GenerationRequest) -> tuple[list[int], list[int]]:
        tokens: list[int] = []
        async for ev in fe.stream(req):
            tokens += ev.token_ids
            if ev.result is not None:
                return tokens, ev.result.output_ids
        raise AssertionError("stream ended without a result")

    async def all_streams() -> list[tuple[list[int], list[int]]]:
        return list(await asyncio.gather(*(consume(r) for r in _reqs())))

    expected = [r.output_ids for r in fes.run(fe.generate_many(_reqs()))]
    for (streamed, final), want in zip(fes.run(all_streams()), expected, strict=True):
        assert streamed == final == want


def test_stop_token_ends_the_request_where_it_is_committed(fes) -> None:
    ref = _reference(LARGE)[0]
    stop = ref[5]
    req = GenerationRequest(PROMPTS[0], max_new_tokens=NEW, stop_token_ids=[stop])
    result = fes.run(fes.fe["p1"].generate(req))
    assert result.output_ids == ref[: ref.index(stop) + 1] and result.finish_reason == "stop"


def test_bad_requests_fail_clearly_and_leave_the_server_usable(fes) -> None:
    fe = fes.fe["p35"]
    with pytest.raises(RequestError, match="empty prompt"):
        fes.run(fe.generate(GenerationRequest([], max_new_tokens=4)))
    with pytest.raises(RequestError, match="outside the vocabulary"):
        fes.run(fe.generate(GenerationRequest([1, 500], max_new_tokens=4)))
    with pytest.raises(RequestError, match="KV tokens"):
        fes.run(fe.generate(GenerationRequest([1, 2], max_new_tokens=10_000)))
    assert len(fes.run(fe.generate(GenerationRequest([1, 2], max_new_tokens=4))).output_ids) == 4
    assert fe.stats()["active_requests"] == 0


def test_cancelled_request_is_dropped_everywhere_and_others_continue(fes) -> None:
    fe = fes.fe["p35"]

    async def scenario() -> list[int]:
        doomed = asyncio.create_task(fe.generate(GenerationRequest([5, 5], max_new_tokens=3000, seed=9)))
        await asyncio.sleep(0.2)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert fe.stats()["active_requests"] == 0
        return (await fe.generate(_reqs()[0])).output_ids

    assert fes.run(scenario()) == fes.run(fe.generate(_reqs()[0])).output_ids


def test_auto_thresholds_come_from_the_throughput_model(fes) -> None:
    table = auto_table([SMALL, LARGE], AlgorithmSpec("bernoulli", {"route_prob": 0.35}), 6)
    assert table is not None and sorted(table) == [1, 2, 3, 4, 5, 6] and table[6][1] > 1
    fe = fes.fe["p35"]
    assert [fe.thresholds(n) for n in range(1, 7)] == [table[n] for n in range(1, 7)]
    assert fe.thresholds(50) == table[6]
    assert auto_table([SMALL], AlgorithmSpec("stay"), 6) is None
    assert auto_table([SMALL, LARGE], AlgorithmSpec("r2r", {"threshold": 0.4}), 6) is None  # rate unknown


def _ensemble_reference(prompt: list[int], seed: int) -> tuple[list[int], dict[str, int]]:
    """Three models taking turns as the ensemble draws, each committing its own token (sim tokens depend
    on the prefix only, so each token is one fresh prefill on the model that produces it)."""
    specs = [SMALL, MID, LARGE]
    engines = [SimEngine.from_spec(m) for m in specs]
    algo = build_algorithm("ensemble", 0, [m.name for m in specs], ENSEMBLE.params)
    out: list[int] = []
    counts = dict.fromkeys((m.name for m in specs), 0)
    model = 0
    for p in range(NEW):
        seq = prompt + out
        out.append(engines[model].step([StepItem(f"t{p}", seq, prompt_len=len(prompt))]).next_tokens[0])
        counts[specs[model].name] += 1
        model = algo.draw(RouterRequest("r", prompt, out[:-1], seed=seed))
    return out, counts


def test_three_model_ensemble_is_exact(fes) -> None:
    fe = fes.fe["ens3"]
    together = fes.run(fe.generate_many(_reqs()))
    one_by_one = [fes.run(fe.generate(r)) for r in _reqs()]
    for i, (a, b) in enumerate(zip(together, one_by_one, strict=True)):
        want, counts = _ensemble_reference(PROMPTS[i], seed=i)
        assert a.output_ids == b.output_ids == want
        assert a.tokens_per_model == counts
    assert all(sum(r.tokens_per_model[m] for r in together) > 0 for m in ("small", "mid", "large"))


def test_request_too_big_for_a_peer_fails_at_hand_off_and_is_released_everywhere(fes) -> None:
    fe = fes.fe["p1"]
    with pytest.raises(RequestError, match="model 'large': request needs 419 KV tokens"):
        fes.run(fe.generate(GenerationRequest([1, 2, 3], max_new_tokens=400)))
    assert fe.stats()["active_requests"] == 0
    assert fes.run(fe.generate(_reqs()[0])).output_ids == _reference(LARGE)[0]


def test_auto_thresholds_retune_from_measured_routing_rates(monkeypatch) -> None:
    # the rate is unknown up front (all ones, said in stats); after the entry model's first 100 decisions the
    # front end recomputes B*(N) at the measured rate and adopts it
    from tokenrouter.engine.sim import sim_latency
    from tokenrouter.perfmodel import auto_thresholds, preset_for_algorithm
    from tokenrouter.runtime import threshold_planner
    from tokenrouter.runtime.thresholds import make_feasible

    monkeypatch.setattr(threshold_planner, "RETUNE_AT", (100,))
    monkeypatch.setattr(threshold_planner, "RETUNE_POLL_S", 0.05)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the planner child imports the algorithm too
    f = Frontends({"m": ([SMALL, LARGE], AlgorithmSpec("user_algorithms.measured_only", {"p": 0.35}), AUTO)})
    try:
        fe = f.fe["m"]
        assert fe.stats()["thresholds_source"].startswith("all ones") and fe.thresholds(4) == [1, 1]
        f.run(fe.generate_many(_reqs(60)))

        async def retuned() -> str:  # the planner child may need seconds (imports, a cold perfmodel cache)
            for _ in range(600):
                if "measured over" in fe.stats()["thresholds_source"]:
                    break
                await asyncio.sleep(0.1)
            return fe.stats()["thresholds_source"]

        source = f.run(retuned())
        table = [fe.thresholds(n) for n in range(1, 7)]
    finally:
        f.close()
    assert "measured over" in source, source
    p = float(re.search(r"'route_prob': ([0-9.]+)", source).group(1))
    assert 0.2 < p < 0.5
    route, commit = preset_for_algorithm("bernoulli", {"route_prob": p})
    expected = auto_thresholds(route, commit, [sim_latency(SMALL.sim), sim_latency(LARGE.sim)], 6)
    assert table == [make_feasible(expected[n], n) for n in range(1, 7)]
    assert rates_are_measured(AlgorithmSpec("user_algorithms.measured_only", {"p": 0.35}))
    assert not rates_are_measured(AlgorithmSpec("bernoulli", {"route_prob": 0.35}))  # no re-tune
