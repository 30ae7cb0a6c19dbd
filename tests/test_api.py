from __future__ import annotations

import pytest

from tokenrouter.algorithms import algorithm_class, build_algorithm
from tokenrouter.api import PeerRequest, RouterRequest, StepResult, stable_uniform
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, model_specs
from tokenrouter.errors import UserError
from tokenrouter.runtime.messages import PeerMessage, decode, encode


def test_stable_uniform_is_deterministic_and_spread() -> None:
    values = [stable_uniform("k", 7, i) for i in range(2000)]
    assert values == [stable_uniform("k", 7, i) for i in range(2000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert abs(sum(values) / len(values) - 0.5) < 0.03
    assert stable_uniform("k", 8, 0) != stable_uniform("k", 7, 0)


def test_peer_request_round_trips_through_wire_format() -> None:
    msg = PeerRequest("r1", 5, [1, 2, 3], 4, finished=True, fields={"x": 1})
    [back] = decode(encode([PeerMessage(msg, sender=0, handoffs=1)]))
    assert back.msg == msg


def test_send_carries_only_unseen_suffix_and_receive_merges_at_anchor() -> None:
    algo = build_algorithm("bernoulli", 0, ["small", "large"], {"route_prob": 0.5})
    req = RouterRequest("r", [10, 11, 12], [20, 21])
    msg = algo.send(req, 1)
    assert (msg.loc, msg.token_ids, msg.prompt_len) == (0, [10, 11, 12, 20, 21], 3)
    req.peer_seen[1] = 4
    msg = algo.send(req, 1)
    assert (msg.loc, msg.token_ids) == (4, [21])
    peer_side = RouterRequest("r", [10, 11, 12], [20, 99, 98])
    algo.receive(PeerRequest("r", 4, [21, 22], 3), peer_side)
    assert peer_side.output_ids == [20, 21, 22]


def test_bernoulli_decisions_depend_only_on_seed_and_position() -> None:
    small = algorithm_class("bernoulli")(0, ["s", "l"], route_prob=0.35)
    large = algorithm_class("bernoulli")(1, ["s", "l"], route_prob=0.35)
    reqs = [RouterRequest(f"r{i}", [1], [0] * i, seed=i) for i in range(400)]
    step = StepResult(0, reqs, [0] * len(reqs))
    dests = small.route(step)
    assert dests == small.route(StepResult(0, list(reversed(reqs)), [0] * len(reqs)))[::-1]
    assert 0.28 < sum(dests) / len(dests) < 0.42
    assert large.route(step) == [0] * len(reqs)
    assert not small.keeps_token(reqs[0], 1) and large.keeps_token(reqs[0], 0)


def test_bad_algorithm_inputs_are_user_errors() -> None:
    with pytest.raises(UserError, match="unknown routing algorithm"):
        algorithm_class("no_such_algo")
    with pytest.raises(UserError, match="route_prob"):
        build_algorithm("bernoulli", 0, ["s", "l"], {"route_prob": 2})
    with pytest.raises(UserError, match="unknown parameter"):
        build_algorithm("bernoulli", 0, ["s", "l"], {"typo": 1})


def test_config_validation_names_the_bad_field() -> None:
    with pytest.raises(UserError, match="model 'm': unknown engine 'gpu'; known: sglang, sim, torch;"):
        ModelSpec(name="m", engine="gpu")
    with pytest.raises(UserError, match="unknown field"):
        ModelSpec.from_dict({"name": "m", "source": "x", "colour": 1})
    with pytest.raises(UserError, match="device must be cpu, cuda or cuda:N"):
        ModelSpec(name="m", source="x", device="auto")  # would shard layers across GPUs, away from the KV pool
    assert ModelSpec(name="m", source="x", device="cuda:1").device == "cuda:1"
    with pytest.raises(UserError, match="unique"):
        model_specs({"members": [{"name": "a", "engine": "sim"}, {"name": "a", "engine": "sim"}]})
    specs = model_specs({"members": [{"name": "a", "engine": "sim", "sim": {"latency_ms": 2.0}}]})
    assert specs[0].sim.latency_ms == 2.0
    assert AlgorithmSpec.from_dict({"name": "r2r", "threshold": 0.4}).params == {"threshold": 0.4}
    with pytest.raises(UserError, match="runtime"):
        RuntimeConfig.from_dict({"max_wait": 1})
    for bad, match in (({"max_wait_ms": -5}, "max_wait_ms must be a number > 0"),
                       ({"max_batch_size": 0}, "max_batch_size must be an integer >= 1"),
                       ({"max_step_tokens": "lots"}, "max_step_tokens"), ({"ipc": "udp"}, "runtime.ipc"),
                       ({"spin_us": -1}, "spin_us must be a number >= 0"), ({"spin_us": True}, "spin_us")):
        with pytest.raises(UserError, match=match):
            RuntimeConfig.from_dict(bad)
    assert RuntimeConfig.from_dict({"max_wait_ms": 1e9, "ipc": "tcp"}).max_wait_ms == 1e9


def test_latency_profile_forms(tmp_path) -> None:
    import json

    from tokenrouter.engine.latency import LatencyProfile

    assert LatencyProfile.constant(6.0).step_ms(4) == 6.0
    affine = LatencyProfile(base_ms=2.0, per_request_ms=0.5, per_token_ms=0.1)
    assert affine.step_ms(4, new_tokens=14) == 2.0 + 2.0 + 1.0
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"decode_ms": {"1": 1.0, "4": 2.5, "8": 4.5}, "extend_ms_per_token": 0.01}))
    table = LatencyProfile.from_json(path)
    assert table.decode_ms(2) == 1.5 and table.decode_ms(16) == 8.5 and table.decode_ms(1) == 1.0
    path.write_text("{}")
    with pytest.raises(UserError, match="not a `tokenrouter profile` JSON"):
        LatencyProfile.from_json(path)
