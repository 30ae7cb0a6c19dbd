"""The hand-off protocol (tokenrouter/handoff.py) without engines or processes: the commit-or-hand-off rule,
the finish rule, minimal messages, and, over many randomized hand-offs among three models with an algorithm
that overrides send() and receive(), that what each side records as seen by a peer is really shared, that
committed tokens are never rewritten (the front end streams them) and that KV kept is never stale."""

from __future__ import annotations

import pytest

from tokenrouter import handoff
from tokenrouter.algorithms import build_algorithm
from tokenrouter.api import PeerRequest, RouterRequest, RoutingAlgorithm, StepResult, stable_uniform
from tokenrouter.finish import finish_reason

from .runtime.user_algorithms.resend import Resend

NAMES = ["small", "large"]


def test_finish_rule() -> None:
    assert finish_reason(7, 3, 8, {7}) == "stop"  # a stop id wins over length
    assert finish_reason(7, 8, 8, {7}) == "stop"
    assert finish_reason(5, 8, 8, {7}) == "length"
    assert finish_reason(5, 7, 8, ()) == ""


def test_settle_commits_or_hands_off() -> None:
    small, large = (build_algorithm("bernoulli", i, NAMES, {}) for i in range(2))
    req = RouterRequest("r", [1, 2], max_new_tokens=3)
    assert handoff.settle(small, req, 0, 10, ()) == handoff.Settled(True, "", None)  # stays: commit
    assert handoff.settle(small, req, 1, 11, ()) == handoff.Settled(False, "", 1)  # dropped: large regenerates
    assert handoff.settle(large, req, 0, 12, ()) == handoff.Settled(True, "", 0)  # kept and handed back
    assert handoff.settle(large, req, 0, 13, ()) == handoff.Settled(True, "length", None)  # finished: stays
    assert req.output_ids == [10, 12, 13]
    assert handoff.settle(large, RouterRequest("s", [1]), 0, 9, {9}) == handoff.Settled(True, "stop", None)


def test_messages_carry_only_the_unseen_suffix() -> None:
    small, large = (build_algorithm("bernoulli", i, NAMES, {}) for i in range(2))
    req = RouterRequest("r", [1, 2, 3], [4, 5], max_new_tokens=9, seed=4)
    peer, kv_valid = handoff.deliver(small, large, req, None)  # first contact: the prompt comes along
    assert (peer.prompt_ids, peer.output_ids, peer.max_new_tokens, peer.seed) == ([1, 2, 3], [4, 5], 9, 4)
    assert req.peer_seen == {1: 5} and peer.peer_seen == {0: 5} and kv_valid == 0
    peer.commit(6)
    out = handoff.hand_off(large, peer, 0)
    assert (out.msg.loc, out.msg.token_ids, out.first) == (5, [6], False)
    assert handoff.receive(small, out.msg, req, 1) == 5 and req.output_ids == [4, 5, 6]
    assert handoff.hand_off(small, req, 1).first is False
    assert [handoff.step_start(kv, 6) for kv in (0, 4, 5, 6)] == [0, 4, 5, 5]  # a step samples a new position


def test_seen_length_is_capped_at_what_both_sides_hold() -> None:
    """A draft beyond the sender's sequence, stripped by the receiver: neither side may claim it as seen."""
    receiver = Resend(1, NAMES)
    req = RouterRequest("r", [1, 2], [3])
    peer = RouterRequest("r", [1, 2], [3])
    msg = PeerRequest("r", 2, [3, 99], 2, fields={"draft": True})
    assert handoff.receive(receiver, msg, peer, 0) == 2
    assert peer.tokens == [1, 2, 3] and peer.state["draft"] == 99 and peer.peer_seen == {0: 3}
    assert handoff.seen_through(msg, req) == 3


class _Model:
    """A stand-in for one model: a deterministic next token of the tokens its KV was computed over."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.kv: dict[str, list[int]] = {}

    def step(self, req: RouterRequest) -> int:
        kv = self.kv.setdefault(req.rid, [])
        start = handoff.step_start(len(kv), req.seq_len)
        assert kv[:start] == req.tokens[:start], "the KV holds tokens the request no longer has"
        self.kv[req.rid] = req.tokens
        return int(stable_uniform("model", self.index, tuple(req.tokens)) * 50)

    def truncate(self, rid: str, valid: int) -> None:
        del self.kv[rid][valid:]


def _run(algos: list[RoutingAlgorithm], seed: int, max_new: int) -> tuple[RouterRequest, list[int], int]:
    """One request through in-process hand-offs, checking the protocol's invariants after every step; returns
    the final view, the streamed output and the number of hand-offs."""
    models = [_Model(i) for i in range(len(algos))]
    views: list[RouterRequest | None] = [RouterRequest("r", [1, 2, 3], max_new_tokens=max_new, seed=seed)]
    views += [None] * (len(algos) - 1)
    streamed: dict[int, int] = {}  # output index -> token, as the front end assembles a stream
    at = handoffs = 0
    while True:
        view = views[at]
        assert view is not None
        token = models[at].step(view)
        dest = algos[at].route(StepResult(at, [view], [token]))[0]
        settled = handoff.settle(algos[at], view, dest, token, ())
        if settled.committed:
            assert len(view.output_ids) - 1 not in streamed, "a committed token was committed again"
            streamed[len(view.output_ids) - 1] = view.output_ids[-1]
        if settled.finish:
            return view, [streamed[i] for i in range(len(streamed))], handoffs
        if settled.peer is None:
            continue
        dest = settled.peer
        views[dest], valid = handoff.deliver(algos[at], algos[dest], view, views[dest])
        if len(models[dest].kv.get("r", [])) > valid:
            models[dest].truncate("r", valid)
        for x in views:
            for y, seen in (x.peer_seen.items() if x else ()):
                other = views[y]
                assert other is not None and seen <= other.seq_len and x.tokens[:seen] == other.tokens[:seen]
        at = dest
        handoffs += 1


@pytest.mark.parametrize("names", [NAMES, ["a", "b", "c"]])
def test_overridden_send_and_receive_keep_every_view_consistent(names: list[str]) -> None:
    algos: list[RoutingAlgorithm] = [Resend(i, names) for i in range(len(names))]
    hand_offs = 0
    for seed in range(40):
        final, streamed, handoffs = _run(algos, seed, 24)
        assert final.output_ids == streamed and len(streamed) == 24
        hand_offs += handoffs
    assert hand_offs > 200


def test_default_send_and_receive_keep_every_view_consistent() -> None:
    algos: list[RoutingAlgorithm] = [build_algorithm("bernoulli", i, NAMES, {"route_prob": 0.5}) for i in range(2)]
    for seed in range(20):
        final, streamed, _ = _run(algos, seed, 16)
        assert final.output_ids == streamed
