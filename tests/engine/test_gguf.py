"""GGUF files load through transformers' GGUF path into the same engine (a tiny Qwen3 written with `gguf`)."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tokenrouter.cli import main
from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import StepItem
from tokenrouter.engine.torch_engine import TorchEngine
from tokenrouter.models.tiny_random import tiny_random_path


def write_gguf(src: Path, out: Path) -> None:
    """The llama.cpp layout of a Qwen3 checkpoint: metadata, byte-level token list, f32 tensors."""
    model = AutoModelForCausalLM.from_pretrained(src)
    tok = AutoTokenizer.from_pretrained(src)
    cfg = model.config
    w = gguf.GGUFWriter(str(out), arch="qwen3")
    w.add_name("tiny-random-large")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    vocab = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    special = {t.content for t in tok.added_tokens_decoder.values() if t.special}
    w.add_tokenizer_model("gpt2")
    w.add_token_list(vocab)
    w.add_token_types([3 if t in special else 1 for t in vocab])
    w.add_token_scores([0.0] * len(vocab))
    w.add_eos_token_id(tok.eos_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_chat_template(tok.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, cfg.num_hidden_layers)
    for key, value in model.state_dict().items():
        base, suffix = key.rsplit(".", 1)
        w.add_tensor(f"{names.get_name(base)}.{suffix}", value.numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gguf") / "tiny-large.gguf"
    write_gguf(tiny_random_path("large"), out)
    return out


def test_gguf_engine_matches_safetensors_engine(gguf_file, capsys) -> None:
    from_gguf = TorchEngine.from_spec(ModelSpec(name="g", source=str(gguf_file), kv_tokens=256))
    from_dir = TorchEngine.from_spec(ModelSpec(name="d", source="tiny-random:large", kv_tokens=256))
    assert from_gguf.eos_token_ids == from_dir.eos_token_ids
    text = [{"role": "user", "content": "What is 3+4?"}]
    ids = from_gguf.tokenizer.apply_chat_template(text, add_generation_prompt=True, return_dict=False)
    assert ids == from_dir.tokenizer.apply_chat_template(text, add_generation_prompt=True, return_dict=False)
    a, b = from_gguf.step([StepItem("r", ids)]), from_dir.step([StepItem("r", ids)])
    torch.testing.assert_close(a.logits, b.logits)
    assert main(["generate", "--model", str(gguf_file), "--prompt", "hi", "--max-new-tokens", "6", "--json"]) == 0
    gen_gguf = capsys.readouterr().out
    assert main(["generate", "--model", "tiny-random:large", "--prompt", "hi", "--max-new-tokens", "6", "--json"]) == 0
    assert gen_gguf == capsys.readouterr().out


def test_truncated_gguf_is_a_clear_error(gguf_file, tmp_path, capsys) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_file.read_bytes()[:2000])
    assert main(["generate", "--model", str(cut), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cut.gguf" in err and len(err.splitlines()) == 1, err
