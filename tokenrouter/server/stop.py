"""Stop strings (OpenAI's `stop`) matched on the detokenized output as it streams.

Why here, in the HTTP layer: the text of a request only exists once its token stream is reassembled from
every model that committed to it (hand-offs included), which happens in the front end; the subservers see
token ids only. The matcher searches each new piece of text with a look-behind of the longest stop string
minus one character (a stop string may straddle two pieces), and releases only text that cannot be the start
of a stop string, so a stream never shows a client what the final answer cuts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_STOP_STRINGS = 4  # OpenAI's limit


@dataclass
class StopMatcher:
    """Text in, releasable text out. After a match `stopped` is set and the text before the stop string is
    all that was ever released (the stop string itself is excluded, as OpenAI does)."""

    stops: tuple[str, ...]
    text: str = ""  # everything fed so far (cut at the match once stopped)
    released: int = 0  # characters of `text` handed out
    floor: int = 0  # a match must begin here or later (text fed unarmed, before min_tokens, is out of play)
    stopped: bool = False
    _longest: int = field(init=False)

    def __post_init__(self) -> None:
        self._longest = max((len(s) for s in self.stops), default=0)

    def feed(self, delta: str, armed: bool = True) -> str:
        """The text that may be released after `delta`: up to a match, or up to a possible stop prefix.
        Unarmed (the output is still shorter than min_tokens, as vLLM counts it), `delta` is released whole and
        no stop string may begin inside it."""
        if self.stopped or not delta:
            return ""
        if not armed:
            self.text += delta
            self.floor = len(self.text)
            return self._release(len(self.text))
        start = max(self.floor, len(self.text) - self._longest + 1)
        self.text += delta
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            self.text = self.text[: min(hits)]
            return self._release(len(self.text))
        return self._release(len(self.text) - self._held())

    def flush(self) -> str:
        """The held-back tail once the output is complete (it never became a stop string)."""
        return self._release(len(self.text))

    def _held(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of some stop string."""
        for n in range(min(self._longest - 1, len(self.text) - self.floor), 0, -1):
            tail = self.text[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0

    def _release(self, upto: int) -> str:
        upto = max(upto, self.released)
        out, self.released = self.text[self.released : upto], upto
        return out
