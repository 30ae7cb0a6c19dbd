"""Every message that crosses a process boundary, as msgspec Structs with a compact msgpack wire form.

Why msgspec: it encodes and decodes these types in C, type-checked, straight from and into the objects (a
hand-off frame in 0.6-1.8 us where building and parsing positional lists in Python took 5 us, on the path of
every routed token), and, like msgpack, it never executes code (unlike pickle). Each message is a positional
array whose first element is its tag, so one socket carries every kind and frames stay small. A frame is a
list of messages: a subserver sends one frame per destination per loop iteration.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tokenrouter.api import PeerRequest, RouterRequest
from tokenrouter.engine.base import SamplingParams
from tokenrouter.trace.record import BatchRecord

# What the wire carries: seeds as 64-bit signed integers (OpenAI's seed range), token ids and counts as int32.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TOKEN_ID_LIMIT = 2**31


class RequestMeta(msgspec.Struct, array_like=True):
    """What every model needs to serve a request besides its tokens (sent to the entry model and on first
    contact with a peer)."""

    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    stop_ids: list[int]
    outputs: int = 0  # what the finishing step returns besides tokens: OUT_LOGITS | OUT_HIDDEN
    min_new_tokens: int = 0

    def view(self, rid: str, prompt_ids: list[int]) -> RouterRequest:
        """A model's own view of a new request with these settings."""
        return RouterRequest(rid, prompt_ids, [], self.max_new_tokens, self.sampling, self.seed,
                             min_new_tokens=self.min_new_tokens)


OUT_LOGITS = 1
OUT_HIDDEN = 2


# ---- front end -> subserver -------------------------------------------------------------------------------


class Submit(msgspec.Struct, array_like=True, tag=1):
    """A new client request for the entry model."""

    rid: str
    prompt_ids: list[int]
    meta: RequestMeta


class Active(msgspec.Struct, array_like=True, tag=2):
    """The global active request count N and the thresholds every model uses at that N; with
    `runtime.policy=optimal` also each model's launch rule for N (bit k of launch[i]: launch with k ready)."""

    n: int
    thresholds: list[int]
    launch: list[int] | None = None


class Peers(msgspec.Struct, array_like=True, tag=3):
    """Endpoints of every subserver's inbox (index = model index), sent once after all are ready."""

    endpoints: list[str]


class Abort(msgspec.Struct, array_like=True, tag=4):
    """Drop a request wherever it is (client went away)."""

    rid: str


class Shutdown(msgspec.Struct, array_like=True, tag=5):
    """Stop: finish nothing more, exit."""


class StatsRequest(msgspec.Struct, array_like=True, tag=10):
    """Ask for fresh counters; the reply's stats carry `seq` so the front end knows they are current."""

    seq: int


# ---- subserver -> subserver -------------------------------------------------------------------------------


class PeerMessage(msgspec.Struct, array_like=True, tag=6):
    """A hand-off (or release when `msg.finished`) from model `sender`. `handoffs` counts the request's
    hand-offs so far, `stalled` those since its last committed token (runtime.max_handoffs_per_token); `meta`
    rides along only on first contact."""

    msg: PeerRequest
    sender: int
    handoffs: int
    meta: RequestMeta | None = None
    stalled: int = 0


# ---- subserver -> front end -------------------------------------------------------------------------------


class Ready(msgspec.Struct, array_like=True, tag=7):
    """A subserver built its engine and bound its inbox; `profile` is its measured step-latency profile (the
    `tokenrouter profile` JSON) when its model asked for `latency_profile: auto`."""

    model: int
    pid: int
    endpoint: str
    eos_ids: list[int]
    vocab_size: int
    profile: dict[str, Any] | None = None


class Fatal(msgspec.Struct, array_like=True, tag=8):
    """A subserver cannot go on (start-up failure or a crash in its loop); it exits after sending this."""

    model: int
    error: str


class Report(msgspec.Struct, array_like=True, tag=9):
    """One loop iteration's news from a model: committed tokens (`chunks`: rid, start index in the output,
    ids), finishes (rid, reason, output length, hand-offs), per-request failures (rid, error) and counters.
    Start indices let the front end order tokens that reach it from different models out of order.
    `failures` are the request's own fault (it can never fit, its step fails); `algorithm_failures` are the
    routing algorithm's (a plugin call raised or returned nonsense), and `over_budget` counts the route() calls
    that ran past runtime.route_timeout_s."""

    model: int
    chunks: list[tuple[str, int, list[int]]] = msgspec.field(default_factory=list)
    finishes: list[tuple[str, str, int, int]] = msgspec.field(default_factory=list)
    failures: list[tuple[str, str]] = msgspec.field(default_factory=list)
    stats: dict[str, Any] | None = None
    # (rid, logits, hidden) of the finishing step, for requests whose meta asked (RequestMeta.outputs)
    outputs: list[tuple[str, list[float] | None, list[float] | None]] = msgspec.field(default_factory=list)
    trace: list[BatchRecord] = msgspec.field(default_factory=list)  # runtime.trace: batches since the last Report
    algorithm_failures: list[tuple[str, str]] = msgspec.field(default_factory=list)
    over_budget: int = 0


Message = Submit | Active | Peers | Abort | Shutdown | StatsRequest | PeerMessage | Ready | Fatal | Report

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(list[Message])


def encode(messages: list[Message]) -> bytes:
    """One frame holding several messages."""
    return _ENCODER.encode(messages)


def decode(frame: bytes) -> list[Message]:
    """Inverse of `encode`; raises ValueError on a frame that is not ours (or whose fields have wrong types)."""
    try:
        return _DECODER.decode(frame)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"malformed runtime frame: {exc}") from None
