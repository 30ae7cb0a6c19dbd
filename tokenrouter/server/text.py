"""Text <-> token ids for the HTTP server: tokenization, chat templates and detokenization off the event loop.

Why a thread pool: tokenizing a 1 MB prompt, applying a chat template or decoding a long output takes up to
seconds of CPU; on the event loop that would freeze `/health` and every open stream meanwhile. Hugging Face's
tokenizers release the GIL while they work, so a few threads keep the loop responsive; the pool is small so
that big prompts cannot take every core from the model processes.

Why two lanes: texts of BIG_TEXT_CHARS or more go to one thread of their own. Four 1 MB prompts once held both
threads of a shared pool for seconds, and every small prompt queued behind them (an innocent request 3 s
instead of 0.08 s); now big texts wait for each other only, use one core at most, and each big job hands the
memory its tokenizer freed back to the system (glibc keeps a thread's arena otherwise: the front end grew by
~400 MiB and stayed there). A prompt whose length alone proves it too long is refused before it is tokenized at
all (`chars_per_token`).
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

TEXT_THREADS = 2
BIG_TEXT_CHARS = 32_768  # texts this long or longer: the one-thread big lane
# How much shorter than its input a normalizer's output can be: NFC / NFKC compose at most 4 characters into one
# (the longest canonical decomposition), the others never shrink a text. Normalizers not named here might.
_NORMALIZER_SHRINK = {"NFC": 4, "NFKC": 4, "NFD": 1, "NFKD": 1, "Lowercase": 1, "Prepend": 1}
_KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Digits", "UnicodeScripts"}  # split, never delete
_ONE_CHARACTER = {"[\\s\\S]", "[\\S\\s]"}  # a Split regex that makes every character its own piece


class TextCodec:
    """The entry model's tokenizer behind async methods that run in a small thread pool (None: no tokenizer,
    weightless sim engines; callers check `available` first), big texts in a lane of their own."""

    def __init__(self, tokenizer: Any, threads: int = TEXT_THREADS) -> None:
        self.tokenizer = tokenizer
        self.chars_per_token = chars_per_token(tokenizer)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tokenrouter-text")
        self._big = ThreadPoolExecutor(1, thread_name_prefix="tokenrouter-bigtext")

    @property
    def available(self) -> bool:
        return self.tokenizer is not None

    async def _run(self, size: int, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in the lane for a text of `size` characters."""
        job = functools.partial(fn, *args, **kwargs)
        pool = self._pool
        if size >= BIG_TEXT_CHARS:
            pool, job = self._big, functools.partial(_then_trim, job)
        return await asyncio.get_running_loop().run_in_executor(pool, job)

    async def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return await self._run(len(text), _ids, self.tokenizer.encode, text, add_special_tokens=add_special_tokens)

    async def chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                   template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The chat template applied (`template_kwargs` are extra template variables, e.g. Qwen3's
        enable_thinking); raises whatever the template raises."""
        size = sum(len(m["content"]) for m in messages)
        ids = await self._run(size, self.tokenizer.apply_chat_template, messages,
                              add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False,
                              **(template_kwargs or {}))
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):  # kwargs that change the output
            raise ValueError("the chat template with these chat_template_kwargs gives no list of token ids")
        return ids

    async def decode(self, ids: list[int]) -> str:
        return await self._run(len(ids), self.decode_now, ids)

    def decode_now(self, ids: list[int]) -> str:
        """On the calling thread: for the few-token windows of a stream, where a thread hop costs more."""
        return "" if self.tokenizer is None else self.tokenizer.decode(ids, skip_special_tokens=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._big.shutdown(wait=False, cancel_futures=True)


def _ids(encode: Callable[..., Any], text: str, **kwargs: Any) -> list[int]:
    return list(encode(text, **kwargs))  # the copy off the loop too: a million ids take milliseconds


def _then_trim(job: Callable[[], T]) -> T:
    try:
        return job()
    finally:
        _trim()


def _trim() -> None:
    """Hand the heap memory freed by a big job back to the system (glibc; elsewhere nothing to do)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def chars_per_token(tokenizer: Any) -> int | None:
    """At most how many characters of a text one token of `tokenizer` stands for, where its pipeline makes that
    certain: a BPE model without fused unknown tokens (a token stands for at most its own string: byte-level and
    Metaspace strings are never shorter than their text) or a character-level word model; normalizers that never
    shrink a text but by NFC / NFKC composition; pre-tokenizers that split without deleting; added tokens that
    absorb no whitespace. A prompt of more than `limit` times this many characters then has more than `limit`
    tokens. None where only tokenizing tells (WordPiece and Unigram turn a whole unknown word into one token, a
    Strip normalizer or a Whitespace pre-tokenizer deletes text, a slow tokenizer has no pipeline to read)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    spec = json.loads(backend.to_str())
    shrink, pre = _shrink(spec.get("normalizer")), spec.get("pre_tokenizer")
    added = spec.get("added_tokens") or []
    if shrink is None or not _keeps_text(pre) or any(t.get("lstrip") or t.get("rstrip") for t in added):
        return None
    model = spec.get("model") or {}
    if model.get("type") == "BPE" and not model.get("fuse_unk"):
        longest = max(map(len, model.get("vocab") or {}), default=1)
    elif model.get("type") == "WordLevel" and _one_character_pieces(pre):
        longest = 1
    else:
        return None
    return shrink * max([longest, 1, *(len(t.get("content", "")) for t in added)])


def _shrink(node: dict[str, Any] | None) -> int | None:
    """By how much a normalizer can shorten a text at most (None: unknown, it may delete)."""
    if node is None:
        return 1
    kind = node.get("type")
    if kind == "Sequence":
        factor = 1
        for part in node.get("normalizers", []):
            f = _shrink(part)
            if f is None:
                return None
            factor *= f
        return factor
    if kind == "Replace":
        pattern, content = (node.get("pattern") or {}).get("String"), node.get("content") or ""
        return -(-len(pattern) // len(content)) if pattern and content else None
    return _NORMALIZER_SHRINK.get(kind or "")


def _keeps_text(node: dict[str, Any] | None) -> bool:
    """Whether a pre-tokenizer only splits (never deletes, as Whitespace or a Split with behavior Removed do)."""
    if node is None:
        return True
    kind = node.get("type")
    if kind == "Sequence":
        return all(_keeps_text(p) for p in node.get("pretokenizers", []))
    if kind in ("Split", "Punctuation"):
        return node.get("behavior") != "Removed"
    return kind in _KEEPING_PRE_TOKENIZERS


def _one_character_pieces(node: dict[str, Any] | None) -> bool:
    """Whether a pre-tokenizer makes every character a piece of its own (a character-level tokenizer)."""
    if node is None:
        return False
    if node.get("type") == "Sequence":
        return any(_one_character_pieces(p) for p in node.get("pretokenizers", []))
    return (node.get("type") == "Split" and (node.get("pattern") or {}).get("Regex") in _ONE_CHARACTER
            and node.get("behavior") == "Isolated" and not node.get("invert"))


class IncrementalDetokenizer:
    """Text deltas for a growing list of token ids. Decodes a short window (the last emitted token onward)
    and holds back a delta that ends inside a multi-byte character (U+FFFD), as vLLM does."""

    def __init__(self, codec: TextCodec) -> None:
        self.codec = codec
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0
        self.emitted: list[str] = []

    def add(self, ids: list[int]) -> str:
        if not self.codec.available:
            return ""
        self.ids.extend(ids)
        before = self.codec.decode_now(self.ids[self.prefix : self.read])
        after = self.codec.decode_now(self.ids[self.prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            self.emitted.append(after[len(before) :])
            return self.emitted[-1]
        return ""

    async def flush(self) -> str:
        """Whatever the held-back window still owes, so the deltas add up to the full decode."""
        if not self.codec.available:
            return ""
        full, sent = await self.codec.decode(self.ids), "".join(self.emitted)
        return full[len(sent) :] if full.startswith(sent) else ""
