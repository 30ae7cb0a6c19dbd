"""Every message that crosses a process boundary, as dataclasses with a compact msgpack wire form.

Why explicit wire forms: msgpack never executes code (unlike pickle), a positional list per message keeps
frames small and encoding cheap on the per-token path, and one tag byte lets one socket carry every kind.
A frame is a list of messages, so a subserver sends one frame per destination per loop iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from tokenrouter.api import PeerRequest, RouterRequest
from tokenrouter.engine.base import SamplingParams

# What the wire carries: seeds as 64-bit signed integers (OpenAI's seed range), token ids and counts as int32.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TOKEN_ID_LIMIT = 2**31


@dataclass
class RequestMeta:
    """What every model needs to serve a request besides its tokens (sent to the entry model and on first
    contact with a peer)."""

    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    stop_ids: list[int]
    outputs: int = 0  # what the finishing step returns besides tokens: OUT_LOGITS | OUT_HIDDEN
    min_new_tokens: int = 0

    def to_wire(self) -> list[Any]:
        s = self.sampling
        return [self.max_new_tokens, [s.temperature, s.top_p, s.top_k, s.seed], self.seed, self.stop_ids,
                self.outputs, self.min_new_tokens]

    @classmethod
    def from_wire(cls, w: list[Any]) -> RequestMeta:
        t, p, k, sd = w[1]
        return cls(w[0], SamplingParams(t, p, k, sd), w[2], list(w[3]), w[4], w[5])

    def view(self, rid: str, prompt_ids: list[int]) -> RouterRequest:
        """A model's own view of a new request with these settings."""
        return RouterRequest(rid, prompt_ids, [], self.max_new_tokens, self.sampling, self.seed,
                             min_new_tokens=self.min_new_tokens)


OUT_LOGITS = 1
OUT_HIDDEN = 2


# ---- front end -> subserver -------------------------------------------------------------------------------


@dataclass
class Submit:
    """A new client request for the entry model."""

    TAG = 1
    rid: str
    prompt_ids: list[int]
    meta: RequestMeta

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.rid, self.prompt_ids, self.meta.to_wire()]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Submit:
        return cls(w[1], list(w[2]), RequestMeta.from_wire(w[3]))


@dataclass
class Active:
    """The global active request count N and the thresholds every model uses at that N; with
    `runtime.policy=optimal` also each model's launch rule for N (bit k of launch[i]: launch with k ready)."""

    TAG = 2
    n: int
    thresholds: list[int]
    launch: list[int] | None = None

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.n, self.thresholds, self.launch]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Active:
        return cls(w[1], list(w[2]), None if len(w) < 4 or w[3] is None else [int(x) for x in w[3]])


@dataclass
class Peers:
    """Endpoints of every subserver's inbox (index = model index), sent once after all are ready."""

    TAG = 3
    endpoints: list[str]

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.endpoints]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Peers:
        return cls(list(w[1]))


@dataclass
class Abort:
    """Drop a request wherever it is (client went away)."""

    TAG = 4
    rid: str

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.rid]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Abort:
        return cls(w[1])


@dataclass
class Shutdown:
    TAG = 5

    def to_wire(self) -> list[Any]:
        return [self.TAG]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Shutdown:
        return cls()


@dataclass
class StatsRequest:
    """Ask for fresh counters; the reply's stats carry `seq` so the front end knows they are current."""

    TAG = 10
    seq: int

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.seq]

    @classmethod
    def from_wire(cls, w: list[Any]) -> StatsRequest:
        return cls(w[1])


# ---- subserver -> subserver -------------------------------------------------------------------------------


@dataclass
class PeerMessage:
    """A hand-off (or release when `msg.finished`) from model `sender`. `handoffs` counts the request's
    hand-offs so far; `meta` rides along only on first contact."""

    TAG = 6
    msg: PeerRequest
    sender: int
    handoffs: int
    meta: RequestMeta | None = None

    def to_wire(self) -> list[Any]:
        meta = None if self.meta is None else self.meta.to_wire()
        return [self.TAG, self.msg.to_wire(), self.sender, self.handoffs, meta]

    @classmethod
    def from_wire(cls, w: list[Any]) -> PeerMessage:
        meta = None if w[4] is None else RequestMeta.from_wire(w[4])
        return cls(PeerRequest.from_wire(w[1]), w[2], w[3], meta)


# ---- subserver -> front end -------------------------------------------------------------------------------


@dataclass
class Ready:
    """A subserver built its engine and bound its inbox; `profile` is its measured step-latency profile (the
    `tokenrouter profile` JSON) when its model asked for `latency_profile: auto`."""

    TAG = 7
    model: int
    pid: int
    endpoint: str
    eos_ids: list[int]
    vocab_size: int
    profile: dict[str, Any] | None = None

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.model, self.pid, self.endpoint, self.eos_ids, self.vocab_size, self.profile]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Ready:
        return cls(w[1], w[2], w[3], list(w[4]), w[5], w[6] if len(w) > 6 else None)


@dataclass
class Fatal:
    """A subserver cannot go on (start-up failure or a crash in its loop); it exits after sending this."""

    TAG = 8
    model: int
    error: str

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.model, self.error]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Fatal:
        return cls(w[1], w[2])


@dataclass
class Report:
    """One loop iteration's news from a model: committed tokens (`chunks`: rid, start index in the output,
    ids), finishes (rid, reason, output length, hand-offs), per-request failures (rid, error) and counters.
    Start indices let the front end order tokens that reach it from different models out of order."""

    TAG = 9
    model: int
    chunks: list[tuple[str, int, list[int]]] = field(default_factory=list)
    finishes: list[tuple[str, str, int, int]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    # (rid, logits, hidden) of the finishing step, for requests whose meta asked (RequestMeta.outputs)
    outputs: list[tuple[str, list[float] | None, list[float] | None]] = field(default_factory=list)

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.model, self.chunks, self.finishes, self.failures, self.stats, self.outputs]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Report:
        return cls(w[1], w[2], w[3], w[4], w[5], w[6] if len(w) > 6 else [])


_TYPES = {c.TAG: c for c in (Submit, Active, Peers, Abort, Shutdown, StatsRequest, PeerMessage, Ready, Fatal, Report)}

Message = Submit | Active | Peers | Abort | Shutdown | StatsRequest | PeerMessage | Ready | Fatal | Report


def encode(messages: list[Message]) -> bytes:
    """One frame holding several messages."""
    return msgpack.packb([m.to_wire() for m in messages], use_bin_type=True)


def decode(frame: bytes) -> list[Message]:
    """Inverse of `encode`; raises ValueError on a frame that is not ours."""
    try:
        items = msgpack.unpackb(frame, raw=False, strict_map_key=False, use_list=True)
        return [_TYPES[w[0]].from_wire(w) for w in items]
    except (msgpack.UnpackException, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"malformed runtime frame: {exc}") from None
