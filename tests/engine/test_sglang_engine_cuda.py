"""The sglang engine on a GPU (skipped without SGLang or CUDA): CUDA graphs replay the all-decode steps and the
greedy tokens equal the torch engine's on the same bf16 model, over prefill, decode, a parked extend and a
truncate + re-extend. Written without a GPU at hand (none was lent to the session that wrote it): a failure
here on a first GPU run may be the test's tolerance as much as the engine."""

from __future__ import annotations

import pytest

pytest.importorskip("sglang")
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from tokenrouter.config import ModelSpec  # noqa: E402
from tokenrouter.engine.base import StepItem  # noqa: E402
from tokenrouter.engine.factory import build_engine  # noqa: E402
from tokenrouter.models.tiny_random import save_random_decoder  # noqa: E402

PROMPTS = [[5, 17, 33], [2, 9, 40, 41, 7, 3, 88], [60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 12]]
NEW = 10


def _run(engine) -> list[list[int]]:
    """All three prefill together, decode together (graph replays), r1 truncated back and re-extended."""
    outs = [[t] for t in engine.step([StepItem(str(i), p) for i, p in enumerate(PROMPTS)]).next_tokens]
    for _ in range(NEW - 1):
        res = engine.step([StepItem(str(i), [o[-1]]) for i, o in enumerate(outs)])
        for o, t in zip(outs, res.next_tokens, strict=True):
            o.append(t)
    engine.truncate("1", len(PROMPTS[1]) + 2)
    again = engine.step([StepItem("1", outs[1][2:6])]).next_tokens[0]
    for i in range(3):
        engine.release(str(i))
    return outs + [[again]]


def test_cuda_graph_decode_equals_torch_engine(tmp_path) -> None:
    path = save_random_decoder(tmp_path / "m", "qwen3", seed=7)
    common = dict(source=str(path), device="cuda", dtype="bfloat16", kv_tokens=4096)
    sgl = build_engine(ModelSpec(name="sglang", engine="sglang", cuda_graph=True, **common))
    try:
        got = _run(sgl)
        assert sgl.graph_steps >= NEW - 1  # every all-decode step replayed a graph
        assert sgl.tokens_used() == 0
    finally:
        sgl.close()
    want = _run(build_engine(ModelSpec(name="torch", engine="torch", **common)))
    assert got == want
    assert got[3] == [got[1][6]]  # truncate + re-extend regenerates the same token
