"""The route / send / receive programming interface for token-level routing algorithms.

Request-centric: an algorithm decides, after every decoding step on a model, where each request goes next.
Model-centric runtime: every model's subserver runs that model's side of the algorithm (one instance per
model, `model_index` tells which side). Only token ids and small algorithm fields cross processes.

Life of a token: a model steps a batch, `route()` returns one destination per request (its own index = stay).
Staying commits the sampled token. A hand-off asks `keeps_token()` whether the sampled token is committed
(R-Stitch, ensembles) or dropped so the peer regenerates it (R2R, CITER, Co-LLM), then `send()` builds the
message with only the suffix the peer has not seen, and the peer's `receive()` merges it.
"""

from __future__ import annotations

import hashlib
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import msgspec

from tokenrouter.engine.base import ALL_STEP_OUTPUTS, Engine, SamplingParams, StepOutputs
from tokenrouter.errors import UserError
from tokenrouter.registry import ALGORITHMS

if TYPE_CHECKING:  # torch only for annotations: sim-engine subservers start without importing it
    import torch


class AlgorithmFailure(UserError):
    """A routing algorithm's call failed a request (it raised, returned what the runtime cannot use, or ran past
    its time budget). One request failed and the system goes on, as with any UserError of a request (a bench run
    counts it and continues), but it is the server's fault, never the client's: HTTP 500, not 400."""


@dataclass
class RouterRequest:
    """One model's local view of a request. Every subserver holds its own copy, kept in sync by messages."""

    rid: str  # the request id, the same on every model
    prompt_ids: list[int]  # the prompt's token ids
    output_ids: list[int] = field(default_factory=list)  # the tokens committed so far, by any model
    max_new_tokens: int = 256  # the request's output budget
    sampling: SamplingParams = field(default_factory=SamplingParams)  # temperature, top_p, top_k, seed
    seed: int = 0  # routing seed: decisions depend on (seed, position) only, never on batching or timing
    min_new_tokens: int = 0  # no stop token is sampled before this many output tokens
    peer_seen: dict[int, int] = field(default_factory=dict)  # peer index -> sequence length it has seen
    state: dict[str, Any] = field(default_factory=dict)  # this model's algorithm scratch space

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def position(self) -> int:
        """Index of the next output token (0 for the first)."""
        return len(self.output_ids)

    def commit(self, token_id: int) -> None:
        self.output_ids.append(int(token_id))

    def unseen_by(self, peer: int) -> tuple[int, list[int]]:
        """(loc, tokens) the peer has not seen yet: the sequence from `loc` on."""
        loc = min(self.peer_seen.get(peer, 0), self.seq_len)
        plen = len(self.prompt_ids)  # slice without building prompt + output: hand-offs stay O(suffix)
        return loc, self.output_ids[loc - plen:] if loc >= plen else self.prompt_ids[loc:] + self.output_ids


@dataclass
class StepResult:
    """What route() sees after one step on a model: per request, the forward's results."""

    model_index: int  # the model that stepped (this algorithm instance's own)
    requests: list[RouterRequest]  # the batch, in step order
    next_tokens: list[int]  # per request, the token just sampled (not yet committed)
    logits: torch.Tensor | None = None  # [B, vocab] next-token logits
    hidden: torch.Tensor | None = None  # [B, hidden] last hidden state after the final norm

    def __len__(self) -> int:
        return len(self.requests)


class PeerRequest(msgspec.Struct, array_like=True):
    """The message a model sends a peer: ids only, never hidden states or KV.

    `token_ids` are the tokens the peer has not seen, starting at sequence index `loc` (the position anchor:
    the peer truncates to `loc` and appends, so replies carry only the minimal suffix). `prompt_len` lets the
    peer split prompt from output on first contact. `finished` tells the peer to release the request.
    `fields`: an algorithm's own extras (msgpack-able values). A msgspec Struct, not a dataclass: it crosses
    process boundaries on every hand-off, and as a positional array it is a third the size and twice as fast
    to build, encode and decode.
    """

    rid: str
    loc: int
    token_ids: list[int]
    prompt_len: int
    finished: bool = False
    fields: dict[str, Any] = msgspec.field(default_factory=dict)


RatesSource = Literal["preset", "measured"]


@dataclass(frozen=True)
class Needs:
    """What an algorithm needs from the runtime, declared so that no system guesses it.

    `step_outputs`: what `route()` reads from a step besides the sampled tokens (`StepResult.logits`,
    `.hidden`); the subservers, lock-step and Std. Serving's servers return only these, which spares a
    [B, vocab] and a [B, hidden] copy per step. Undeclared, an algorithm gets both: always correct, only slower.
    `rates`: where `rates()` gets its routing rates for `thresholds=auto`. "preset": from the config params
    alone (bernoulli, ensemble), so one plan holds for the whole run. "measured": from the decisions the
    runtime counts (`rates(routes)`; learned routers, R-Stitch), so the front end re-plans while serving.
    """

    step_outputs: StepOutputs = ALL_STEP_OUTPUTS  # what route() reads besides the tokens: "logits", "hidden"
    rates: RatesSource = "preset"  # where rates() gets its routing rates: "preset" or "measured"

    def __post_init__(self) -> None:
        unknown = set(self.step_outputs) - ALL_STEP_OUTPUTS
        if unknown or self.rates not in ("preset", "measured"):
            raise ValueError(f"Needs: step_outputs must be within {sorted(ALL_STEP_OUTPUTS)} (got {sorted(unknown)} "
                             f"extra) and rates 'preset' or 'measured' (got {self.rates!r})")


class RoutingAlgorithm(ABC):
    """One model's side of a token-level routing algorithm. Subclass, register, add a YAML: no runtime change."""

    name: ClassVar[str] = ""
    needs: ClassVar[Needs] = Needs()

    def __init__(self, model_index: int, model_names: list[str], **params: Any) -> None:
        """One instance per model: `model_index` is this model, `model_names` the set (entry model first),
        `params` the algorithm config's keys besides `name`. A subclass takes its own parameters as keyword
        arguments and passes the rest up, so a misspelt one is refused in one line."""
        self.model_index = model_index
        self.model_names = list(model_names)
        self.num_models = len(model_names)
        if params:
            raise UserError(f"algorithm {self.name!r}: unknown parameter(s) {sorted(params)}")

    @classmethod
    def resolve_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Called once in the front end before any subserver starts: the parameters subservers get, with
        remote references (a Hub router) replaced by local files, so no subserver downloads or lists the Hub."""
        return params

    def check(self) -> None:
        """Called in the front end before any subserver starts: validate what `bind()` will load (router
        files), so bad input is one clear line at once rather than a failed start-up after the models load."""

    def bind(self, engine: Engine) -> None:
        """Called once in the subserver process before serving: load router networks onto the engine's device."""

    @abstractmethod
    def route(self, step: StepResult) -> list[int]:
        """One destination model index per request; `self.model_index` means stay."""

    def keeps_token(self, req: RouterRequest, peer: int) -> bool:
        """On a hand-off to `peer`: commit the just-sampled token (True) or drop it for the peer to regenerate."""
        return False

    def send(self, req: RouterRequest, peer: int) -> PeerRequest:
        """Build the hand-off message: only the suffix the peer has not seen."""
        loc, ids = req.unseen_by(peer)
        return PeerRequest(req.rid, loc, ids, len(req.prompt_ids))

    def rates(self, routes: list[list[int]] | None = None) -> dict[str, Any]:
        """Throughput-model preset for `thresholds=auto` (tokenrouter.algorithms.rates); `routes` is passed
        only when `needs.rates` is "measured". Default: the preset named like the algorithm, its rates taken
        from the config params."""
        return {"preset": self.name}

    def receive(self, msg: PeerRequest, req: RouterRequest) -> None:
        """Merge a peer's message into the local request. Default: accept all tokens."""
        plen = len(req.prompt_ids)
        if msg.loc >= plen:  # the usual case: replace the output from the anchor on, in place (O(suffix))
            del req.output_ids[msg.loc - plen:]
            req.output_ids += msg.token_ids
        else:
            req.output_ids = (req.tokens[: msg.loc] + msg.token_ids)[plen:]


def stable_uniform(*key: Any) -> float:
    """A uniform [0, 1) number that depends only on `key` (stable across processes, runs and batchings)."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return struct.unpack("<Q", digest)[0] / 2.0**64


def register(cls: type[RoutingAlgorithm]) -> type[RoutingAlgorithm]:
    """Class decorator: make an algorithm reachable by its `name` (the YAML's `algorithm.name`) in this process;
    names are looked up by `tokenrouter.algorithms.algorithm_class` (tokenrouter/registry.py)."""
    return ALGORITHMS.register(cls.name, cls)
