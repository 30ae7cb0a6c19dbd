"""One request's output as the HTTP layer serves it: the front end's token stream turned into text pieces,
cut at the first stop string, with the timing the /metrics histograms need.

Why one path for streamed and whole answers: a stop string must end the request in the front end as soon as
it appears (the rest would be wasted model time), which only a stream can do; a whole answer is the joined
pieces of the same stream.

Token accounting when a stop string ends the output: `completion_tokens` (and `token_ids`) are the tokens
committed up to and including the one whose text completed the stop string, as vLLM reports them; the text
stops before the stop string. `tokens_per_model` counts those tokens by the model that committed them and
`handoffs` the model changes among them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.server.frontend_api import FrontEndEvent
from tokenrouter.server.stop import StopMatcher
from tokenrouter.server.text import IncrementalDetokenizer, TextCodec


@dataclass
class Piece:
    """Text and token ids to send in one chunk; `tokens` is the completion length so far."""

    text: str
    token_ids: list[int]
    tokens: int


@dataclass
class Output:
    """Consumes one request's stream events (`pieces()`); afterwards `result` is the finished request
    (None: the stream ended without one) and `token_times` the arrival time of each piece with tokens."""

    req: GenerationRequest
    codec: TextCodec
    stops: tuple[str, ...] = ()
    result: GenerationResult | None = None
    token_times: list[float] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)
    _ids: list[int] = field(default_factory=list)
    _models: list[str] = field(default_factory=list)  # the model of each run of tokens, for hand-offs
    _per_model: Counter[str] = field(default_factory=Counter)

    async def pieces(self, events: AsyncIterator[FrontEndEvent]) -> AsyncIterator[Piece]:
        detok = IncrementalDetokenizer(self.codec)
        matcher = StopMatcher(self.stops)
        async for ev in events:
            if ev.token_ids:
                self.token_times.append(time.perf_counter())
                ids, text = self._take(ev, detok, matcher)
                yield Piece(text, ids, len(self._ids))
                if matcher.stopped:
                    self.result = self._cut()
                    return
            if ev.result is not None:
                text = matcher.feed(await detok.flush())
                text += matcher.flush()
                self.result = replace(ev.result, finish_reason="stop") if matcher.stopped else ev.result
                yield Piece(text, [], len(self._ids))
                return

    def _take(self, ev: FrontEndEvent, detok: IncrementalDetokenizer, matcher: StopMatcher
              ) -> tuple[list[int], str]:
        """The event's tokens up to a stop-string match (token by token when there are stop strings)."""
        steps = [[t] for t in ev.token_ids] if self.stops else [list(ev.token_ids)]
        ids: list[int] = []
        text = ""
        for step in steps:
            ids += step
            armed = len(self._ids) + len(ids) >= self.req.min_new_tokens
            text += matcher.feed(detok.add(step), armed)
            if matcher.stopped:
                break
        self._ids += ids
        self._per_model[ev.model] += len(ids)
        if not self._models or self._models[-1] != ev.model:
            self._models.append(ev.model)
        return ids, text

    def _cut(self) -> GenerationResult:
        """The result of a request ended here by a stop string (the front end never finished it)."""
        first = self.token_times[0] if self.token_times else None
        return GenerationResult(
            index=self.req.index, prompt_ids=list(self.req.prompt_ids), output_ids=list(self._ids),
            finish_reason="stop", tokens_per_model={m: n for m, n in self._per_model.items() if m},
            handoffs=len(self._models) - 1, arrival_s=self.start, first_token_s=first, finish_s=time.perf_counter(),
        )
