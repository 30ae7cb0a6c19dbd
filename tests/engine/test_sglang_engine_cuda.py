"""The sglang engine on a GPU (skipped without SGLang or CUDA): CUDA graphs replay the all-decode steps and the
greedy tokens equal the torch engine's on the same bf16 model, over prefill, decode, a parked extend and a
truncate + re-extend; with 2 GPUs, tp=2 ranks give tp=1's tokens and a killed rank fails the engine. Written without a GPU at hand (none was lent to the session that wrote it): a failure
here on a first GPU run may be the test's tolerance as much as the engine."""

from __future__ import annotations

import pytest

pytest.importorskip("sglang")
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from tokenrouter.config import ModelSpec  # noqa: E402
from tokenrouter.engine.factory import build_engine  # noqa: E402
from tokenrouter.models.tiny_random import save_random_decoder  # noqa: E402

from .cuda_schedule import NEW  # noqa: E402
from .cuda_schedule import run_schedule as _run  # noqa: E402


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


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tp2_equals_tp1_and_a_dead_rank_fails_the_engine(tmp_path) -> None:
    """Two SGLang ranks (cuda:0, cuda:1) driven by rank 0's broadcasts give tp=1's greedy tokens (float32: the
    all-reduce order may differ from a single GPU's sums); killing rank 1 fails the next step as an engine
    failure, not a hang. Each engine runs in a child process of its own: SGLang keeps process-wide state (its
    parallel groups), and this test process may already have hosted the module's other SGLang engine."""
    import json
    import os
    import subprocess
    import sys

    path = save_random_decoder(tmp_path / "m", "qwen3", seed=7)
    common = dict(source=str(path), device="cuda:0", dtype="float32", kv_tokens=4096, engine="sglang")
    script = os.path.join(os.path.dirname(__file__), "cuda_schedule.py")

    def child(spec: dict, *flags: str) -> list:
        done = subprocess.run([sys.executable, script, json.dumps(spec), *flags], capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line) for line in done.stdout.strip().splitlines()[-1 - len(flags):]]

    (want,) = child({"name": "tp1", **common})
    got, failure = child({"name": "tp2", "tp": 2, **common}, "--kill-a-rank")
    assert got == want
    assert failure.startswith("EngineFailure:") and "rank" in failure
