"""The interface every model engine implements, so the runtime, baselines and tools never see model details.

An engine serves many requests at once and keeps each request's KV cache between steps: a request can be
parked (another model generates for it) and resumed later by an extend over the suffix it missed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:  # torch only for annotations: weightless engines never import it
    import torch


StepOutputName = Literal["logits", "hidden"]
StepOutputs = frozenset[StepOutputName]
# Everything a step can return besides the sampled tokens: what a caller that does not say gets.
ALL_STEP_OUTPUTS: StepOutputs = frozenset({"logits", "hidden"})
NO_STEP_OUTPUTS: StepOutputs = frozenset()

GREEDY_TEMPERATURE = 1e-5  # below this, temperature sampling is greedy (as in vLLM): 1/T would overflow


class EngineFailure(RuntimeError):
    """The engine itself is broken (e.g. a tensor-parallel rank died): no request can be served any more, so
    the subserver stops instead of failing requests one by one."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling. A temperature below GREEDY_TEMPERATURE (0 included; NaN too) means greedy. A seed
    makes sampling reproducible per position, independent of how requests are batched."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return not self.temperature >= GREEDY_TEMPERATURE


class StepItem(msgspec.Struct):
    """One request's share of a step: the new tokens to append to its KV (prefill, decode or extend). A msgspec
    Struct, not a dataclass: one is built per request per step, and its constructor runs in C (a third less)."""

    rid: str
    token_ids: list[int]
    sampling: SamplingParams = msgspec.field(default_factory=SamplingParams)
    prompt_len: int = 0  # the request's prompt length (weightless engines place EOS by output position)
    banned_ids: tuple[int, ...] = ()  # ids this step may not sample (stop ids before min_new_tokens)


@dataclass
class StepOutput:
    """Per request (in the order of the step's items): next-token logits and last hidden state of the last
    position, and the sampled next token. `logits`/`hidden` are None for engines without weights (sim) and
    when the step's caller did not ask for them."""

    rids: list[str]
    next_tokens: list[int]
    logits: torch.Tensor | None = None  # [B, vocab]
    hidden: torch.Tensor | None = None  # [B, hidden], after the final norm

    @classmethod
    def asked(cls, rids: list[str], next_tokens: list[int], logits: torch.Tensor, hidden: torch.Tensor,
              outputs: StepOutputs) -> StepOutput:
        """The step's result with only the outputs the caller asked for, as clones: tensors made in inference
        mode cannot enter autograd-tracked code (routers' own), a clone outside it is an ordinary tensor."""
        return cls(rids, next_tokens, logits.clone() if "logits" in outputs else None,
                   hidden.clone() if "hidden" in outputs else None)


def check_step_items(items: list[StepItem], vocab_size: int) -> tuple[list[str], list[int], list[int]]:
    """(rids, new-token counts, all new ids) of a non-empty step, or ValueError naming what is malformed: each
    request at most once, at least one token each, every id inside the vocabulary."""
    rids = [it.rid for it in items]
    if len(set(rids)) != len(rids):
        raise ValueError("a step may hold each request at most once")
    counts = [len(it.token_ids) for it in items]
    if min(counts) < 1:
        raise ValueError(f"request {rids[counts.index(min(counts))]!r}: a step item needs at least one token")
    ids = [t for it in items for t in it.token_ids]
    if max(ids) >= vocab_size or min(ids) < 0:
        raise ValueError(f"token id out of range for a vocabulary of {vocab_size}")
    return rids, counts, ids


class Engine(ABC):
    """A model that serves many requests at once with a KV cache per request."""

    name: str
    eos_token_ids: tuple[int, ...] = ()
    vocab_size: int = 0
    hidden_size: int = 0
    device: Any = "cpu"  # a torch.device on engines with weights
    max_positions: int | None = None  # the longest sequence the model can position (None: no known limit)

    @abstractmethod
    def step(self, items: list[StepItem], outputs: StepOutputs = ALL_STEP_OUTPUTS) -> StepOutput:
        """Append each item's tokens to its request's KV in ONE forward over the mixed batch; sample one token each.
        `outputs`: what the caller reads besides the tokens (an algorithm's `needs.step_outputs`); an engine
        may leave the others None, which saves copying a [B, vocab] and a [B, hidden] tensor per step."""

    @abstractmethod
    def release(self, rid: str) -> None:
        """Forget a request and return its KV pages. Unknown ids are ignored."""

    @abstractmethod
    def truncate(self, rid: str, length: int) -> None:
        """Roll a request's KV back to its first `length` tokens."""

    @abstractmethod
    def seq_len(self, rid: str) -> int:
        """Tokens of `rid` held in the KV cache (0 for an unknown request)."""

    @abstractmethod
    def tokens_free(self) -> int:
        """KV slots that new tokens can still take."""

    @abstractmethod
    def tokens_used(self) -> int:
        """KV slots in use."""

    def can_fit(self, rid: str, num_new_tokens: int) -> bool:
        """Whether appending `num_new_tokens` to `rid` fits in the free KV (conservative for paged pools)."""
        return num_new_tokens <= self.tokens_free()

    def holds(self, rid: str) -> bool:
        """Whether `rid` has state here (what a release must undo)."""
        return self.seq_len(rid) > 0

    def check_step(self, items: list[StepItem]) -> tuple[list[str], list[int], list[int]]:
        """The checks a step makes before it touches any state (malformed items; engines add KV that would not
        fit): the same on every TP rank, so tp.py runs them once on rank 0 before broadcasting the step."""
        return check_step_items(items, self.vocab_size)

    def input_embeddings(self) -> torch.nn.Embedding | None:
        """The model's input token embedding (routers such as R2R's embed the predicted token with it)."""
        return None

    def close(self) -> None:
        """Free resources. Safe to call twice."""
