"""A test-only algorithm with one bug per request seed, in every plugin call the runtime makes (issue #43): a
bad destination, a raising keeps_token() / send() / receive() (one after a stream began), a malformed or foreign
hand-off message, a route() that sleeps, a request handed back and forth forever, an exception no
`except Exception` catches. Every other
request routes as bernoulli does, so innocent requests share batches with the faulty ones.
`fail_init: true` makes the constructor raise."""

from __future__ import annotations

import time
from typing import Any

from tokenrouter.algorithms.bernoulli import Bernoulli
from tokenrouter.api import PeerRequest, RouterRequest, StepResult, register

RAISES = 13  # route() raises on the request's input (a router's NaN)
FLOAT = 101  # route() returns 1.5
OUT_OF_RANGE = 102  # route() returns 7 (two models)
EXTRA = 103  # route() returns one destination too many
KEEPS = 104  # keeps_token() raises
SEND = 105  # send() raises
RECEIVE = 106  # the peer's receive() raises
MALFORMED = 107  # send() returns a message whose loc is a string
FOREIGN = 108  # send() returns a message for another request id
SLOW = 109  # route() sleeps 5 s
LOOP = 110  # handed back and forth without ever committing a token
DEADLY = 111  # route() raises a BaseException: the subserver dies (one line to the client, traceback to the log)
LATE = 112  # send() raises on a hand-off after three committed tokens: a stream fails midway
BAD_TOKEN = 113  # send() passes a token id no vocabulary has: the peer's step fails on it (the request's fault)
SEEDS = {"route raises": RAISES, "float destination": FLOAT, "destination out of range": OUT_OF_RANGE,
         "destination count": EXTRA, "keeps_token raises": KEEPS, "send raises": SEND, "receive raises": RECEIVE,
         "malformed message": MALFORMED, "foreign message": FOREIGN}


class Deadly(BaseException):
    """Not an Exception: escapes every guard."""


@register
class Misbehaving(Bernoulli):
    name = "misbehaving"

    def __init__(self, model_index: int, model_names: list[str], fail_init: bool = False, **params: Any) -> None:
        if fail_init:
            raise ValueError("cannot read the router weights")
        super().__init__(model_index, model_names, **params)

    def route(self, step: StepResult) -> list[int]:
        seeds = [r.seed for r in step.requests]
        if RAISES in seeds:
            raise FloatingPointError("router input is NaN")
        if DEADLY in seeds:
            raise Deadly("the router process state is gone")
        if SLOW in seeds:
            time.sleep(5.0)
        dests: list[Any] = super().route(step)
        for i, seed in enumerate(seeds):
            if seed in (KEEPS, SEND, RECEIVE, MALFORMED, FOREIGN, LOOP, BAD_TOKEN) or (seed == LATE and
                                                                           step.requests[i].position >= 3):
                dests[i] = 1 - self.model_index  # hand off
            elif seed == FLOAT:
                dests[i] = 1.5
            elif seed == OUT_OF_RANGE:
                dests[i] = 7
        return dests + [0] if EXTRA in seeds else dests

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        if req.seed == KEEPS:
            raise KeyError("no such state")
        return req.seed != LOOP and super().keeps_token(req, peer)

    def send(self, req: RouterRequest, peer: int) -> PeerRequest:
        if req.seed in (SEND, LATE):
            raise RuntimeError("cannot build the message")
        msg = super().send(req, peer)
        if req.seed == MALFORMED:
            msg.loc = "here"  # type: ignore[assignment]
        elif req.seed == FOREIGN:
            msg.rid = "someone-else"
        elif req.seed == BAD_TOKEN:
            msg.token_ids = [*msg.token_ids, 10**6]
        return msg

    def receive(self, msg: PeerRequest, req: RouterRequest) -> None:
        if req.seed == RECEIVE:
            raise ValueError("cannot merge the message")
        super().receive(msg, req)
