"""A test-only algorithm that overrides send() and receive(), the probe of the one hand-off protocol
(tests/test_handoff.py, tests/runtime/test_handoff_systems.py).

send() anchors up to two tokens early (it resends tokens the peer has seen: the peer's KV must roll back to
the anchor) and sometimes appends the token this side sampled last as a draft, beyond its own sequence;
receive() strips the draft into the request's state, so what the receiver holds is shorter than anchor +
tokens sent. Every model may hand off to any other; the entry model may drop its token, the others keep
theirs (so a position never ping-pongs). Every choice depends on (seed, position, model) only, so all
systems make the same ones.
"""

from __future__ import annotations

from typing import Any

from tokenrouter.api import PeerRequest, RouterRequest, RoutingAlgorithm, StepResult, register, stable_uniform


@register
class Resend(RoutingAlgorithm):
    name = "resend"

    def __init__(self, model_index: int, model_names: list[str], route_prob: float = 0.4, **params: Any) -> None:
        super().__init__(model_index, model_names, **params)
        self.route_prob = route_prob

    def _u(self, what: str, req: RouterRequest) -> float:
        return stable_uniform("resend", what, req.seed, req.position, self.model_index)

    def route(self, step: StepResult) -> list[int]:
        dests = []
        for req, token in zip(step.requests, step.next_tokens, strict=True):
            req.state["sampled"] = int(token)
            if self._u("route", req) >= self.route_prob:
                dests.append(self.model_index)
                continue
            other = int(self._u("peer", req) * (self.num_models - 1))
            dests.append((self.model_index + 1 + other) % self.num_models)
        return dests

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        return self.model_index != 0 or self._u("keep", req) < 0.4  # the others keep theirs: no ping-pong

    def send(self, req: RouterRequest, peer: int) -> PeerRequest:
        seen, _ = req.unseen_by(peer)
        loc = max(0, seen - int(self._u("back", req) * 3))
        ids = req.tokens[loc:]
        draft = self._u("draft", req) < 0.5
        if draft:
            ids.append(req.state["sampled"])
        return PeerRequest(req.rid, loc, ids, len(req.prompt_ids), fields={"draft": draft})

    def receive(self, msg: PeerRequest, req: RouterRequest) -> None:
        super().receive(msg, req)
        if msg.fields["draft"]:
            req.state["draft"] = req.output_ids.pop()
