"""The runtime with `engine: sglang` on both sides (real SGLang on CPU, real subserver processes): never-routed
requests give the small model's own greedy output, always-routed ones the large model's (every token crosses a
hand-off and a resume extend), and mixed routing gives the same tokens as the torch engines on the same models.

Skipped without SGLang; the subservers run with this interpreter, so running pytest from .venv-sglang makes
them SGLang-capable (`make test-sglang`)."""

from __future__ import annotations

import pytest

pytest.importorskip("sglang")

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig  # noqa: E402
from tokenrouter.engine.torch_engine import TorchEngine  # noqa: E402
from tokenrouter.generation import GenerationRequest  # noqa: E402
from tokenrouter.models.tiny_random import save_random_decoder  # noqa: E402

from .conftest import Frontends, greedy_reference, user_algorithms_importable  # noqa: E402

PROMPTS = [[5, 17, 33, 40], [2, 9, 40, 41, 7, 3, 88, 12, 13], [60, 61, 62], [44, 8, 19, 90, 1, 30]]
NEW = 10
NEVER, ALWAYS, MIXED = 0, 1, 2  # seed % 3 -> route probability 0, 1, 0.35 (user_algorithms/seeded.py)
SEEDED = AlgorithmSpec("user_algorithms.seeded")


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


def _frontends(models: dict[str, str], engine: str, algorithm: AlgorithmSpec = SEEDED) -> Frontends:
    specs = [ModelSpec(name=n, source=p, engine=engine, kv_tokens=2048) for n, p in models.items()]
    with user_algorithms_importable():
        return Frontends({"fe": (specs, algorithm,
                                 RuntimeConfig(thresholds=[1, 2], max_wait_ms=10.0, startup_timeout_s=300.0))})


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


def test_r2r_router_runs_on_sglang_hidden_states_as_on_torch(models, tmp_path) -> None:
    """The R2R router reads the step's last hidden state, logits and input embedding: from SGLang's ModelRunner
    they must give the router the same decisions, so the same tokens, as from the torch engine."""
    import torch

    from tokenrouter.algorithms.checkpoints import save_router
    from tokenrouter.algorithms.routers import build_router

    torch.manual_seed(0)
    net = build_router("r2r", {"hidden_states_size": 128, "vocab_size": 100, "hidden_dims": [64] * 2})
    save_router(net, tmp_path / "r2r" / "router", 0.5, {})
    scores_at = AlgorithmSpec("r2r", {"router": str(tmp_path / "r2r"), "threshold": 0.5})
    outputs = {}
    for engine in ("sglang", "torch"):
        fes = _frontends(models, engine, scores_at)
        try:
            results = fes.run(fes.fe["fe"].generate_many(_reqs(MIXED)))
        finally:
            fes.close()
        outputs[engine] = [(r.output_ids, r.tokens_per_model["large"]) for r in results]
    assert outputs["sglang"] == outputs["torch"]
    assert 0 < sum(large for _, large in outputs["sglang"]) < NEW * len(PROMPTS)  # the router really chose
