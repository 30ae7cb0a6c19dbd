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
from tokenrouter.engine.base import StepItem  # noqa: E402
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
    failure, not a hang. Each engine runs in its own process (SGLang keeps process-wide state): this one
    for tp=2, a child for tp=1."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from tokenrouter.engine.base import EngineFailure

    path = save_random_decoder(tmp_path / "m", "qwen3", seed=7)
    common = dict(source=str(path), device="cuda:0", dtype="float32", kv_tokens=4096, engine="sglang")
    script = os.path.join(os.path.dirname(__file__), "cuda_schedule.py")
    one = subprocess.run([sys.executable, script, json.dumps({"name": "tp1", **common})], capture_output=True,
                         text=True, timeout=900)
    assert one.returncode == 0, one.stderr[-2000:]
    want = json.loads(one.stdout.strip().splitlines()[-1])
    engine = build_engine(ModelSpec(name="tp2", tp=2, **common))
    try:
        assert _run(engine) == want
        engine.step([StepItem("x", [1, 2, 3])])
        os.kill(engine.procs[0].pid, signal.SIGKILL)
        engine.procs[0].wait(30)
        with pytest.raises(EngineFailure, match="rank"):
            engine.step([StepItem("x", [4])])
    finally:
        engine.close()
