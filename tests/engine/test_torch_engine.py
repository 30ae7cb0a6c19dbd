"""TorchEngine against transformers' own `generate`: same greedy tokens for mixed, staggered, parked batches."""

from __future__ import annotations

import copy
import zlib

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from tokenrouter.engine.base import SamplingParams, StepItem
from tokenrouter.engine.torch_engine import TorchEngine
from tokenrouter.errors import CapacityError

from .schedules import staggered_parked_schedule

VOCAB = 97
NEW = 12
PROMPTS = [[5, 17, 33], [2, 9, 40, 41, 7, 3, 88], [60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 12], [44, 8, 19, 90, 1]]


def _random_model(family: str, tied: bool) -> torch.nn.Module:
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  tie_word_embeddings=tied, eos_token_id=None, bos_token_id=None, pad_token_id=0)
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))  # q/k/v biases
    else:
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common))  # q/k norm
    gen = torch.Generator().manual_seed(zlib.crc32(f"{family}-{tied}".encode()))
    with torch.no_grad():  # a wide init gives peaked logits: argmax is robust to kernel rounding differences
        for name, p in model.named_parameters():
            base = 1.0 if name.endswith("norm.weight") else 0.0
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen))
    return model.eval()


def _reference(model: torch.nn.Module, prompt: list[int], n: int = NEW) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module", params=[("llama", False), ("qwen2", True), ("qwen3", False), ("qwen3", True)],
                ids=lambda p: f"{p[0]}-{'tied' if p[1] else 'untied'}")
def pair(request):
    model = _random_model(*request.param)
    ref_model = copy.deepcopy(model)
    refs = [_reference(ref_model, p) for p in PROMPTS]
    engine = TorchEngine(model, kv_tokens=1024, page_size=4)
    return engine, ref_model, refs


def test_greedy_matches_hf_generate_with_staggered_joins_and_parked_extend(pair) -> None:
    engine, _, refs = pair
    def shapes(step: int, items: list[StepItem], res) -> None:
        assert res.logits.shape == (len(items), VOCAB) and res.hidden.shape == (len(items), 64)

    out = staggered_parked_schedule(engine, PROMPTS, refs, NEW, shapes)
    for r in out:
        assert out[r][:NEW] == refs[int(r)], f"request {r}"
        assert engine.seq_len(r) == len(PROMPTS[int(r)]) + NEW - 1
        engine.release(r)
    assert engine.tokens_used() == 0


def test_logits_and_hidden_match_a_full_forward(pair) -> None:
    engine, ref_model, refs = pair
    seqs = [p + refs[i][:4] for i, p in enumerate(PROMPTS[:2])]
    res = engine.step([StepItem("a", seqs[0][:-2]), StepItem("b", seqs[1])])
    res = engine.step([StepItem("a", seqs[0][-2:]), StepItem("b", [7])])
    with torch.no_grad():
        for i, seq in enumerate([seqs[0], seqs[1] + [7]]):
            base = ref_model.get_decoder()(torch.tensor([seq])).last_hidden_state[0, -1]
            torch.testing.assert_close(res.hidden[i], base, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(res.logits[i], ref_model.lm_head(base), atol=1e-4, rtol=1e-4)
    engine.release("a")
    engine.release("b")


def test_truncate_rolls_back_and_regenerates_the_same_tokens(pair) -> None:
    engine, _, refs = pair
    prompt = PROMPTS[2]
    first = engine.step([StepItem("t", prompt)]).next_tokens[0]
    seq = prompt + refs[2][:6]
    engine.step([StepItem("t", seq[len(prompt):])])
    assert engine.seq_len("t") == len(seq)
    engine.truncate("t", len(prompt) - 1)  # roll back into the prompt: the last prompt token again
    assert engine.seq_len("t") == len(prompt) - 1
    assert engine.step([StepItem("t", prompt[-1:])]).next_tokens == [first]
    assert engine.step([StepItem("t", refs[2][:5])]).next_tokens == [refs[2][5]]
    engine.release("t")
    assert engine.seq_len("t") == 0 and engine.tokens_used() == 0


def test_capacity_exhaustion_is_a_clear_error_and_freeing_returns_pages() -> None:
    engine = TorchEngine(_random_model("llama", True), kv_tokens=64, page_size=16)
    assert engine.tokens_free() == 64
    engine.step([StepItem("a", list(range(1, 50)))])
    assert engine.tokens_used() == 49 and engine.tokens_free() == 15
    assert engine.can_fit("a", 15) and not engine.can_fit("a", 16) and not engine.can_fit("b", 1)
    with pytest.raises(CapacityError, match="KV pool full"):
        engine.step([StepItem("a", [3]), StepItem("b", [1, 2])])
    assert engine.seq_len("a") == 49 and engine.seq_len("b") == 0  # nothing half-applied
    for bad in ([StepItem("a", [VOCAB])], [StepItem("a", [])], [StepItem("a", [1]), StepItem("a", [2])]):
        with pytest.raises(ValueError):
            engine.step(bad)
    assert engine.seq_len("a") == 49
    engine.release("a")
    assert engine.tokens_free() == 64
    assert len(engine.step([StepItem("b", list(range(1, 65)))]).next_tokens) == 1


def test_kv_budget_from_bytes_and_too_small_budget() -> None:
    model = _random_model("llama", True)
    per_token = 2 * 2 * 2 * 16 * 4  # K+V, layers, kv heads, head dim, float32
    engine = TorchEngine(model, kv_bytes=per_token * 100, page_size=16)
    assert engine.tokens_free() == 96
    with pytest.raises(CapacityError, match="below one page"):
        TorchEngine(model, kv_tokens=8, page_size=16)


def test_seeded_sampling_is_independent_of_batching(pair) -> None:
    engine, _, _ = pair
    sp = SamplingParams(temperature=1.0, top_p=0.9, top_k=20, seed=7)
    alone = engine.step([StepItem("s", PROMPTS[0], sp)]).next_tokens
    engine.release("s")
    mixed = engine.step([StepItem("x", PROMPTS[1]), StepItem("s", PROMPTS[0], sp)]).next_tokens[1:]
    assert alone == mixed
    engine.release("s")
    engine.release("x")


@pytest.mark.parametrize(("heads", "kv_heads"), [(8, 2), (4, 4), (6, 1)])
def test_masked_extend_attention_folds_gqa_like_enable_gqa(heads: int, kv_heads: int) -> None:
    """The extend path's folded GQA equals SDPA with attn_mask + enable_gqa (the math-kernel fallback it avoids)."""
    from tokenrouter.engine.attention import masked_attention

    gen = torch.Generator().manual_seed(0)
    n, length, dim = 5, 13, 16
    q = torch.randn(1, heads, n, dim, generator=gen)
    k, v = (torch.randn(1, kv_heads, length, dim, generator=gen) for _ in range(2))
    mask = torch.arange(length).unsqueeze(0) <= torch.arange(length - n, length).unsqueeze(1)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3,
                                                            enable_gqa=heads != kv_heads)
    torch.testing.assert_close(masked_attention(q, k, v, mask, 0.3), want, rtol=1e-5, atol=1e-6)
