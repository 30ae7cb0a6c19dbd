"""Text <-> token ids for the HTTP server: tokenization, chat templates and detokenization off the event loop.

Why a thread pool: tokenizing a 1 MB prompt, applying a chat template or decoding a long output takes up to
seconds of CPU; on the event loop that would freeze `/health` and every open stream meanwhile. Hugging Face's
tokenizers release the GIL while they work, so a few threads keep the loop responsive; the pool is small so
that big prompts cannot take every core from the model processes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

TEXT_THREADS = 2


class TextCodec:
    """The entry model's tokenizer behind async methods that run in a small thread pool (None: no tokenizer,
    weightless sim engines; callers check `available` first)."""

    def __init__(self, tokenizer: Any, threads: int = TEXT_THREADS) -> None:
        self.tokenizer = tokenizer
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tokenrouter-text")

    @property
    def available(self) -> bool:
        return self.tokenizer is not None

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(await self._run(self.tokenizer.encode, text, add_special_tokens=add_special_tokens))

    async def chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                   template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """The chat template applied (`template_kwargs` are extra template variables, e.g. Qwen3's
        enable_thinking); raises whatever the template raises."""
        ids = await self._run(self.tokenizer.apply_chat_template, messages, add_generation_prompt=add_generation_prompt,
                              tokenize=True, return_dict=False, **(template_kwargs or {}))
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):  # kwargs that change the output
            raise ValueError("the chat template with these chat_template_kwargs gives no list of token ids")
        return ids

    async def decode(self, ids: list[int]) -> str:
        return await self._run(self.decode_now, ids)

    def decode_now(self, ids: list[int]) -> str:
        """On the calling thread: for the few-token windows of a stream, where a thread hop costs more."""
        return "" if self.tokenizer is None else self.tokenizer.decode(ids, skip_special_tokens=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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
