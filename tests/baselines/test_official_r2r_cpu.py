"""The official R2R code itself (its HTTP server, SGLang 0.5.1) on this CPU through `bench`, beside TokenRouter
with the same router and threshold: the same tokens. Needs R2R's environment (`make official-venv`; skipped
without it); slow (~2 min)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tokenrouter.evals.agreement import compare, load_requests

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (ROOT / ".venv-r2r" / "R2R").is_dir(), reason="R2R's environment not built: make official-venv")]


def test_official_r2r_on_cpu_answers_as_tokenrouter_with_the_same_router(tmp_path: Path) -> None:
    import torch

    from tokenrouter.algorithms.checkpoints import save_router
    from tokenrouter.algorithms.routers import build_router

    torch.manual_seed(0)  # a random router whose scores straddle the threshold: both models make tokens
    net = build_router("r2r", {"hidden_states_size": 64, "vocab_size": 100, "hidden_dims": [16], "logits_size": 100})
    weights, sidecar = save_router(net, tmp_path / "router" / "r2r", 0.5, {})
    runs = {}
    for system in ("official_r2r", "tokenrouter"):
        runs[system] = tmp_path / system
        cmd = [sys.executable, "-m", "tokenrouter", "bench", "+experiment=official_cpu", f"system={system}",
               "concurrency=2", "warmup_requests=0", "workload.num_problems=3", "workload.max_new_tokens=16",
               f"++models.routers.r2r={sidecar}", f"hydra.run.dir={runs[system]}"]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    official = json.loads((runs["official_r2r"] / "summary.json").read_text())
    assert official["official_r2r"]["device"] == "cpu" and official["official_r2r"]["threshold"] == 0.5
    agreement = compare(load_requests(runs["official_r2r"]), load_requests(runs["tokenrouter"]))
    assert agreement.requests == 3 and agreement.identical == 3, agreement
    ours = json.loads((runs["tokenrouter"] / "summary.json").read_text())
    assert official["large_token_share"] == pytest.approx(ours["large_token_share"])
    assert 0 < ours["large_token_share"] < 1  # both models made tokens: routing was exercised
