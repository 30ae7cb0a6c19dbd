"""The tiny random pair: built once from a seed, loadable by stock transformers, not degenerate."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tokenrouter.models import tiny_random
from tokenrouter.models.tokenizer import build_char_tokenizer


def _greedy(path, prompt: str, n: int = 24) -> list[int]:
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  return_dict=False)
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(ids):].tolist()


def test_built_once_deterministic_and_shared_tokenizer(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TOKENROUTER_CACHE", str(tmp_path))
    with ThreadPoolExecutor(2) as pool:  # concurrent first use must not collide
        paths = list(pool.map(tiny_random.tiny_random_path, ["small", "small"]))
    small = paths[0]
    assert paths[1] == small and (small / "model.safetensors").is_file()
    assert json.loads((small / "tokenrouter_build.json").read_text())["version"] == tiny_random.BUILD_VERSION
    assert sorted(p.name for p in (tmp_path / "tiny-random").iterdir()) == ["small"]  # no temp dirs left
    mtime = (small / "model.safetensors").stat().st_mtime_ns
    assert tiny_random.tiny_random_path("small") == small
    assert (small / "model.safetensors").stat().st_mtime_ns == mtime  # cached, not rebuilt
    large = tiny_random.tiny_random_path("large")
    assert AutoTokenizer.from_pretrained(small).get_vocab() == build_char_tokenizer().get_vocab()
    assert AutoTokenizer.from_pretrained(large).get_vocab() == build_char_tokenizer().get_vocab()
    cfg_s, cfg_l = (json.loads((p / "config.json").read_text()) for p in (small, large))
    assert cfg_l["num_key_value_heads"] < cfg_l["num_attention_heads"]  # GQA in the large one
    assert cfg_s["tie_word_embeddings"] and not cfg_l["tie_word_embeddings"]
    a, _ = tiny_random.build_model("small")
    b, _ = tiny_random.build_model("small")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_greedy_outputs_are_diverse_and_differ_between_sizes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TOKENROUTER_CACHE", str(tmp_path))
    small, large = tiny_random.tiny_random_path("small"), tiny_random.tiny_random_path("large")
    for prompt in ["What is 12+7?", "Tell me a story.", "abc"]:
        s, g = _greedy(small, prompt), _greedy(large, prompt)
        assert s != g, prompt
        assert len(set(s)) >= 4 and len(set(g)) >= 4, (s, g)  # not one token repeated
