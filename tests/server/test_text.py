"""The HTTP server's text work (tokenrouter/server/text.py, issue #43 item 10): big texts never hold up small
ones and give their memory back, and the characters-per-token bound that refuses a prompt before tokenizing is
certain or absent."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from tokenrouter.engine.loader import load_tokenizer
from tokenrouter.server.text import BIG_TEXT_CHARS, TextCodec, chars_per_token


@pytest.fixture(scope="module")
def tiny():
    return load_tokenizer("tiny-random:small")


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


def test_small_texts_never_queue_behind_big_ones_and_big_ones_give_memory_back(tiny) -> None:
    """Three 0.5 MB prompts used to take both threads of the one pool (a small prompt waited for them, seconds),
    and glibc kept the ~100 MiB each left behind in its thread arenas."""
    codec = TextCodec(tiny)
    big = "the quick brown fox jumps over the lazy dog. " * 11_000
    assert len(big) >= BIG_TEXT_CHARS

    async def run() -> tuple[float, list[list[int]]]:
        await codec.encode("warm up")
        jobs = [asyncio.ensure_future(codec.encode(big)) for _ in range(3)]
        await asyncio.sleep(0.05)
        t0 = time.perf_counter()
        assert await codec.encode("an innocent prompt") == tiny.encode("an innocent prompt")
        small = time.perf_counter() - t0
        return small, await asyncio.gather(*jobs)

    try:
        before = _rss_mib()
        small, bigs = asyncio.run(run())
        grown = _rss_mib() - before
    finally:
        codec.close()
    assert [len(ids) for ids in bigs] == [len(big)] * 3  # character-level: one token per character
    assert small < 0.2, f"a small prompt waited {small:.2f} s behind big ones"
    assert grown < 60, f"the process kept {grown:.0f} MiB after tokenizing big prompts"


def _bpe(vocab: dict[str, int], **kw) -> Tokenizer:
    return Tokenizer(models.BPE(vocab=vocab, merges=[], **kw))


def _bound(tok: Tokenizer) -> int | None:
    return chars_per_token(SimpleNamespace(backend_tokenizer=tok))


def test_chars_per_token_is_certain_or_none(tiny) -> None:
    assert chars_per_token(tiny) == len("<|endoftext|>")  # character level; its longest added token
    text = "x <|im_start|> y" * 1000
    assert len(tiny.encode(text)) >= len(text) / chars_per_token(tiny)
    assert chars_per_token(None) is None and chars_per_token(SimpleNamespace()) is None  # sim, slow tokenizers

    bpe = _bpe({"a": 0, "b": 1, "abab": 2})
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()
    assert _bound(bpe) == 4  # a token stands for at most its own string
    bpe.normalizer = normalizers.NFC()
    assert _bound(bpe) == 16  # composition: up to 4 characters become one
    bpe.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace("  ", " ")])
    assert _bound(bpe) == 8
    bpe.normalizer = normalizers.Strip()  # deletes text: no bound
    assert _bound(bpe) is None
    bpe.normalizer = None
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()  # drops whitespace
    assert _bound(bpe) is None
    bpe.pre_tokenizer = pre_tokenizers.Split(" ", "removed")
    assert _bound(bpe) is None
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(), pre_tokenizers.Metaspace()])
    assert _bound(bpe) == 4
    bpe.add_special_tokens([AddedToken("<mask>", lstrip=True)])  # absorbs any run of spaces before it
    assert _bound(bpe) is None
    fused = _bpe({"a": 0, "<unk>": 1}, unk_token="<unk>", fuse_unk=True)  # one token for any unknown run
    assert _bound(fused) is None
    word = Tokenizer(models.WordPiece(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]"))  # a whole word: one [UNK]
    assert _bound(word) is None
