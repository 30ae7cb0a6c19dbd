"""The hand-off protocol of token-level routing, written once.

Why: TokenRouter's subservers, the lock-step baseline and Std. Serving's dispatcher must run the same
algorithm, not three copies of its rules, or the comparison they exist for means nothing. Each system calls
these functions around its own I/O: after a step, `settle()` commits or hands off; `hand_off()` builds the
message to the peer; the peer calls `first_contact()` for a request it has never seen, then `receive()`,
which says where its KV stops being valid; before stepping, `step_start()` says where the input begins.

Pure: no engines, sockets or clocks. These functions only call the algorithm's `keeps_token()` / `send()` /
`receive()` and keep the request's own view (`RouterRequest`: its output and what each peer has seen).
"""

from __future__ import annotations

from collections.abc import Container

import msgspec

from tokenrouter.api import PeerRequest, RouterRequest, RoutingAlgorithm
from tokenrouter.engine.base import SamplingParams
from tokenrouter.finish import finish_reason


class Settled(msgspec.Struct, gc=False):
    """What a step's sampled token did to one request (see `settle()`). Built once per request-step: a msgspec
    Struct is built in C, a third of a slotted dataclass's cost (a NamedTuple's Python `__new__` costs more)."""

    committed: bool  # the token was appended to the request's output (stream it, count it)
    finish: str  # "" while running, else the finish reason ("stop" | "length")
    peer: int | None  # hand the request off to this model; None: it stays (or it finished)


def settle(algo: RoutingAlgorithm, req: RouterRequest, dest: int, token: int, stop_ids: Container[int]) -> Settled:
    """After a step on `algo`'s model routed `req` to `dest`: commit the sampled token when the request stays
    or the algorithm keeps it on a hand-off (else the peer regenerates that position), then apply the finish
    rule. A request that finishes never hands off: its last token is already out."""
    here = algo.model_index
    committed = dest == here or algo.keeps_token(req, dest)
    reason = ""
    if committed:
        req.commit(token)
        reason = finish_reason(token, len(req.output_ids), req.max_new_tokens, stop_ids, req.min_new_tokens)
    return Settled(committed, reason, None if reason or dest == here else dest)


def seen_through(msg: PeerRequest, req: RouterRequest) -> int:
    """How much of the sequence both sides of `msg` now share: up to the end of what it carried, but never past
    `req`'s own length. The cap matters once an algorithm overrides `send()` / `receive()`: a message may carry
    tokens beyond the sender's sequence (a draft) and the receiver may drop tokens it was sent, and a seen length
    that claims more than is shared makes the next message skip tokens."""
    return min(msg.loc + len(msg.token_ids), req.seq_len)


class Outgoing(msgspec.Struct):
    """A hand-off message and whether the sender has never sent this request to that peer (the peer then
    needs the request's settings, which the message itself does not carry)."""

    msg: PeerRequest
    first: bool


class ProtocolError(ValueError):
    """A plugin call returned what the hand-off protocol cannot use (the message says what and why)."""


def hand_off(algo: RoutingAlgorithm, req: RouterRequest, peer: int) -> Outgoing:
    """The sender's side: `send()` builds the message (by default only the suffix the peer has not seen), and
    the request records what the peer will have seen, so the next message to it is minimal again. A message
    that is no PeerRequest of this request is refused (ProtocolError): applied by the peer, another request's
    id would corrupt that request."""
    first = peer not in req.peer_seen
    msg = algo.send(req, peer)
    if not isinstance(msg, PeerRequest) or msg.rid != req.rid or type(msg.loc) is not int \
            or type(msg.token_ids) is not list:
        raise ProtocolError(_bad_message(msg, req))
    req.peer_seen[peer] = seen_through(msg, req)
    return Outgoing(msg, first)


def overrides_send(algo: RoutingAlgorithm) -> bool:
    """Whether `algo` builds its own messages (the default send() needs no wire check)."""
    return type(algo).send is not RoutingAlgorithm.send


def check_wire(msg: PeerRequest) -> None:
    """A message from an overriding send() as the peer will decode it: wrong field types or values msgpack cannot
    carry would otherwise fail the whole frame at the peer, and with it every hand-off it holds."""
    try:
        _PEER_REQUEST.decode(_ENCODE(msg))
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"send() built a message no peer can read: {exc}") from None


_PEER_REQUEST = msgspec.msgpack.Decoder(PeerRequest)
_ENCODE = msgspec.msgpack.Encoder().encode


def _bad_message(msg: object, req: RouterRequest) -> str:
    if not isinstance(msg, PeerRequest):
        return f"send() returned {type(msg).__name__}, not a PeerRequest"
    if msg.rid != req.rid:
        return f"send() built a message for request {str(msg.rid)[:40]!r}, not {req.rid!r}"
    return (f"send() built a message whose loc is {type(msg.loc).__name__} and token_ids "
            f"{type(msg.token_ids).__name__} (int and list expected)")


def first_contact(msg: PeerRequest, max_new_tokens: int, sampling: SamplingParams, seed: int,
                  min_new_tokens: int = 0) -> RouterRequest:
    """The receiver's own view of a request it has never seen: the prompt is the message's first `prompt_len`
    tokens (a peer that has seen nothing is sent the sequence from 0), the output comes with `receive()`."""
    return RouterRequest(msg.rid, msg.token_ids[: msg.prompt_len], [], max_new_tokens, sampling, seed,
                         min_new_tokens=min_new_tokens)


def receive(algo: RoutingAlgorithm, msg: PeerRequest, req: RouterRequest, sender: int) -> int:
    """The receiver's side: `receive()` merges the message, the request records what the sender has seen.
    Returns the KV truncation point: KV beyond the anchor `loc` may hold tokens the message replaced, and KV
    beyond the merged sequence holds tokens `receive()` dropped; truncate any longer KV to it."""
    algo.receive(msg, req)
    req.peer_seen[sender] = seen_through(msg, req)
    return min(msg.loc, req.seq_len)


def step_start(kv_len: int, seq_len: int) -> int:
    """Where a request's next step input begins (tokens[start:], the KV truncated to `start` first if shorter):
    where its KV ends, or one token back when the KV already holds the whole sequence (the dropped token came
    back unchanged), since every step must sample a new position."""
    return min(kv_len, seq_len - 1)


class PluginCallFailed(Exception):
    """The algorithm's `call` (`send()` or `receive()`) on model `model` (the sender's or the receiver's side)
    raised `cause`, or returned what the protocol cannot use, in a hand-off within one process: its caller fails
    the request and blames the algorithm."""

    def __init__(self, call: str, model: int, cause: Exception) -> None:
        super().__init__(f"{call}: {type(cause).__name__}: {cause}")
        self.call = call
        self.model = model
        self.cause = cause


def deliver(sender: RoutingAlgorithm, receiver: RoutingAlgorithm, req: RouterRequest,
            peer_view: RouterRequest | None) -> tuple[RouterRequest, int]:
    """A hand-off within one process (lock-step, Std. Serving's dispatcher): `hand_off()` on the sender's view,
    then `first_contact()` if the receiver has no view yet and `receive()` on it, exactly as between two
    subservers. Returns the receiver's view and its KV truncation point; PluginCallFailed names the call that
    failed."""
    try:  # what the message would do at a peer in another process, it does here: fail this request alone
        out = hand_off(sender, req, receiver.model_index)
        if overrides_send(sender):
            check_wire(out.msg)
        if peer_view is None:
            peer_view = first_contact(out.msg, req.max_new_tokens, req.sampling, req.seed, req.min_new_tokens)
    except Exception as exc:
        raise PluginCallFailed("send()", sender.model_index, exc) from exc
    try:
        return peer_view, receive(receiver, out.msg, peer_view, sender.model_index)
    except Exception as exc:
        raise PluginCallFailed("receive()", receiver.model_index, exc) from exc
