"""engine=sglang configuration errors that need no SGLang install: one clear line each (run by `make test`)."""

from __future__ import annotations

import importlib.util

import pytest

from tokenrouter.config import ModelSpec
from tokenrouter.engine.factory import build_engine, prepare_models
from tokenrouter.errors import UserError


def _model_dir(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    return str(tmp_path)


def test_tensor_parallelism_on_cpu_is_refused(tmp_path) -> None:
    with pytest.raises(UserError, match="SGLang tensor parallelism needs CUDA"):
        prepare_models([ModelSpec(name="m", source=_model_dir(tmp_path), engine="sglang", tp=2)])


def test_cuda_graph_must_be_a_bool() -> None:
    with pytest.raises(UserError, match="cuda_graph must be true or false"):
        ModelSpec(name="m", source="x", engine="sglang", cuda_graph="yes")


def test_missing_sglang_says_how_to_install_it(tmp_path) -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed here")
    with pytest.raises(UserError, match="make sglang-venv"):
        build_engine(ModelSpec(name="m", source=_model_dir(tmp_path), engine="sglang"))
