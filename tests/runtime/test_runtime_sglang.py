"""The runtime with `engine: sglang` on both sides (real SGLang on CPU, real subserver processes): never-routed
requests give the small model's own greedy output, always-routed ones the large model's (every token crosses a
hand-off and a resume extend), and mixed routing gives the same tokens as the torch engines on the same models.

Skipped without SGLang; the subservers run with this interpreter, so running pytest from .venv-sglang makes
them SGLang-capable (`make test-sglang`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("sglang")

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig  # noqa: E402
from tokenrouter.engine.torch_engine import TorchEngine  # noqa: E402
from tokenrouter.models.tiny_random import save_random_decoder  # noqa: E402
from tokenrouter.results import GenerationRequest  # noqa: E402

from .conftest import Frontends, greedy_reference  # noqa: E402

PROMPTS = [[5, 17, 33, 40], [2, 9, 40, 41, 7, 3, 88, 12, 13], [60, 61, 62], [44, 8, 19, 90, 1, 30]]
NEW = 10
NEVER, ALWAYS, MIXED = 0, 1, 2  # seed % 3 -> route probability 0, 1, 0.35 (user_algorithms/seeded.py)


def _reqs(kind: int) -> list[GenerationRequest]:
    return [GenerationRequest(p, max_new_tokens=NEW, seed=3 * i + kind, index=i, stop_token_ids=[])
            for i, p in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sglang-pair")
    small = save_random_decoder(root / "small", "qwen3", seed=11)
    large = save_random_decoder(root / "large", "llama", num_layers=3, hidden_size=256, num_heads=4,
                                num_kv_heads=2, seed=12)
    return {"small": str(small), "large": str(large)}


@pytest.fixture(scope="module")
def references(models) -> dict[str, list[list[int]]]:
    refs = {}
    for name, path in models.items():
        engine = TorchEngine.from_spec(ModelSpec(name=name, source=path, kv_tokens=2048))
        engine.eos_token_ids = ()  # match the runtime requests: no early stop
        refs[name] = [greedy_reference(engine, p, NEW) for p in PROMPTS]
    assert refs["small"] != refs["large"]
    return refs


def _frontends(models: dict[str, str], engine: str) -> Frontends:
    specs = [ModelSpec(name=n, source=p, engine=engine, kv_tokens=2048) for n, p in models.items()]
    here = str(Path(__file__).parent)
    sys.path.insert(0, here)  # subservers inherit sys.path, so they import the test algorithm too
    try:
        return Frontends({"fe": (specs, AlgorithmSpec("user_algorithms.seeded"),
                                 RuntimeConfig(thresholds=[1, 2], max_wait_ms=10.0, startup_timeout_s=300.0))})
    finally:
        sys.path.remove(here)


def test_sglang_subservers_are_exact_and_agree_with_torch_subservers(models, references) -> None:
    fes = _frontends(models, "sglang")
    try:
        fe = fes.fe["fe"]
        results = fes.run(fe.generate_many(_reqs(NEVER) + _reqs(ALWAYS)))
        never, always = results[: len(PROMPTS)], results[len(PROMPTS):]
        assert [r.output_ids for r in never] == references["small"]
        assert all(r.tokens_per_model == {"small": NEW, "large": 0} for r in never)
        assert [r.output_ids for r in always] == references["large"]
        assert all(r.tokens_per_model == {"small": 0, "large": NEW} and r.handoffs == 2 * NEW - 1 for r in always)
        mixed = [r.output_ids for r in fes.run(fe.generate_many(_reqs(MIXED)))]
    finally:
        fes.close()
    fes = _frontends(models, "torch")
    try:
        assert [r.output_ids for r in fes.run(fes.fe["fe"].generate_many(_reqs(MIXED)))] == mixed
    finally:
        fes.close()
