"""Model sources: built-in tiny models load through the engine; bad paths and corrupt files fail in one line."""

from __future__ import annotations

import shutil

import pytest

from tokenrouter.config import ModelSpec
from tokenrouter.engine import build_engine
from tokenrouter.engine.base import StepItem
from tokenrouter.engine.loader import check_source, load_model, load_tokenizer, resolve_source
from tokenrouter.errors import UserError
from tokenrouter.models.tiny_random import tiny_random_path


def test_tiny_random_engine_from_spec_and_tokenizer() -> None:
    tok = load_tokenizer("tiny-random:large")
    engine = build_engine(ModelSpec(name="large", source="tiny-random:large", kv_tokens=512))
    assert engine.eos_token_ids == (tok.convert_tokens_to_ids("<|im_end|>"),)
    assert engine.input_embeddings().num_embeddings == len(tok) == engine.vocab_size
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, return_dict=False)
    out = engine.step([StepItem("r", ids)])
    assert out.hidden.shape == (1, engine.hidden_size) and 0 <= out.next_tokens[0] < engine.vocab_size
    assert load_tokenizer("") is None


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("/no/such/model", "neither a file, a directory nor a Hub id"),
        ("tiny-random:medium", "tiny-random:small or tiny-random:large"),
    ],
)
def test_bad_sources(source: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_model(source)


def test_not_a_model_dir_or_file(tmp_path) -> None:
    with pytest.raises(UserError, match="no config.json"):
        resolve_source(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(UserError, match="not a .gguf file"):
        resolve_source(str(tmp_path / "weights.bin"))


def test_corrupt_safetensors_and_gguf(tmp_path) -> None:
    bad = tmp_path / "model"
    shutil.copytree(tiny_random_path("small"), bad)
    (bad / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UserError, match=r"cannot load model from .*model: ") as err:
        load_model(str(bad))
    assert "\n" not in str(err.value)
    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"GGML not really")
    with pytest.raises(UserError, match="broken.gguf"):
        load_model(str(gguf))


def test_check_source_reads_headers_only(tmp_path) -> None:
    good = tmp_path / "good"
    shutil.copytree(tiny_random_path("small"), good)
    check_source(str(good))  # whole files pass; built-in and Hub sources are the loader's business
    check_source("tiny-random:small")
    check_source("Qwen/Qwen3-0.6B")
    weights = good / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # cut short, as an interrupted copy leaves it
    with pytest.raises(UserError, match=f"model weights {weights} are not a readable safetensors file"):
        check_source(str(good))
    (tmp_path / "broken.gguf").write_bytes(b"GGML not really")
    with pytest.raises(UserError, match="broken.gguf: not a readable GGUF file"):
        check_source(str(tmp_path / "broken.gguf"))
    with pytest.raises(UserError, match="model not found"):
        check_source(str(tmp_path / "missing"))


def test_bad_dtype_and_device() -> None:
    with pytest.raises(UserError, match="unknown dtype"):
        load_model("tiny-random:small", dtype="float8")
    with pytest.raises(UserError, match="CUDA is not available|cannot move"):
        build_engine(ModelSpec(name="m", source="tiny-random:small", device="cuda:7"))
