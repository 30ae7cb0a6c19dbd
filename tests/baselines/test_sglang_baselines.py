"""The baselines on REAL SGLang servers (`sglang.launch_server` from .venv-sglang, CPU): Std. Serving and
query-level routing run the same prompts as on our servers, greedy outputs agree, SGLang's stage timers
give the Table-10 breakdown, and SIGINT leaves no process behind. `make test-sglang` (needs `make sglang-venv`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime.http_helpers import alive, descendant_pids
from tokenrouter.baselines.http_model import HttpModelSystem
from tokenrouter.baselines.sglang_server import sglang_python
from tokenrouter.baselines.std_serving import StdServingOptions, StdServingSystem
from tokenrouter.config import AlgorithmSpec, RuntimeConfig, model_specs
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PAIR = {"members": [{"name": "small", "source": "tiny:small", "kv_tokens": 8192},
                    {"name": "large", "source": "tiny:large", "kv_tokens": 8192}]}


@pytest.fixture(scope="module", autouse=True)
def _sglang() -> None:
    try:
        sglang_python()
    except UserError as exc:
        pytest.skip(str(exc))


def _prompts(n: int) -> list[GenerationRequest]:
    from tokenrouter.engine.loader import load_tokenizer
    from tokenrouter.evals.workloads import encode_problem, load_workload

    workload = load_workload({"name": "arith", "loader": "arith", "num_problems": n, "max_new_tokens": 48}, seed=5)
    tok = load_tokenizer("tiny:small")
    return [GenerationRequest(encode_problem(p, tok), max_new_tokens=48, seed=i, index=i)
            for i, p in enumerate(workload.problems)]


def test_std_serving_on_sglang_agrees_with_ours_and_reports_sglangs_stages() -> None:
    """R-Stitch reads the small model's logits: SGLang returns hidden states only, the dispatcher applies the
    output head; on the same prompts the greedy outputs agree with Std. Serving on our servers."""
    specs = model_specs(PAIR)
    algo = AlgorithmSpec("rstitch", {"tau": 0.03})
    runtime = RuntimeConfig(thresholds=[1, 1])
    reqs = _prompts(6)

    async def run(server: str) -> tuple[list, dict]:
        async with StdServingSystem(specs, algo, runtime, options=StdServingOptions(server=server)) as std:
            await std.generate(reqs[0])  # warm-up
            std.reset_stats()
            got = list(await asyncio.gather(*(std.generate(r) for r in reqs)))
            return got, std.stats()

    ours, _ = asyncio.run(run("tokenrouter"))
    theirs, stats = asyncio.run(run("sglang"))
    same = sum(a.output_ids == b.output_ids for a, b in zip(ours, theirs, strict=True))
    print(f"greedy outputs equal on {same} of {len(reqs)} requests")
    assert same >= len(reqs) - 1
    assert sum(r.tokens_per_model.get("large", 0) for r in theirs) > 0 and sum(r.handoffs for r in theirs) > 0
    assert stats["server"] == "sglang"
    cost = stats["models"]["small"]["per_token_ms"]
    assert cost["dispatch"] > cost["http_round_trip"] > cost["server_handling"] > cost["model_step"] > 0
    for stage in ("sglang_get_next_batch_to_run", "sglang_process_batch_result", "sglang_scheduler"):
        assert cost[stage] > 0
    server = stats["models"]["small"]["server"]
    assert server["forward_passes"] >= stats["models"]["small"]["steps"] * 0.5 and server["requests"] > 0


def test_whole_requests_on_sglang_equal_our_runtime() -> None:
    """The single-model / query-level path: each request whole on an SGLang server, streamed."""
    from tokenrouter.baselines.single import single_model_system

    spec = model_specs(PAIR)[0]
    reqs = _prompts(6)

    async def run() -> tuple[list, list, dict]:
        ours, theirs = single_model_system(spec, RuntimeConfig()), HttpModelSystem(spec, RuntimeConfig())
        try:
            await asyncio.gather(ours.start(), theirs.start())
            a = [await ours.generate(r) for r in reqs]
            b = list(await asyncio.gather(*(theirs.generate(r) for r in reqs)))
            return a, b, theirs.stats()
        finally:
            await asyncio.gather(ours.close(), theirs.close())

    a, b, stats = asyncio.run(run())
    assert sum(x.output_ids == y.output_ids for x, y in zip(a, b, strict=True)) >= len(reqs) - 1
    assert all(len(r.commits) >= 1 and r.finish_reason in ("stop", "length") for r in b)
    assert stats["requests"] == 6 and stats["sglang"]["forward_passes"] > 0


def test_sigint_mid_run_leaves_no_sglang_process(tmp_path: Path) -> None:
    """`tokenrouter bench system=query_routing_sglang`, interrupted while serving: it exits, and every process it
    started (both launch_server processes, their schedulers and detokenizers) is gone."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tokenrouter", "bench", "models=tiny", "system=query_routing_sglang",
           "system.strong_share=0.5", "workload=arith", "workload.num_problems=400", "concurrency=2",
           f"hydra.run.dir={out}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OPENAI_API_KEY="x")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            seen |= set(descendant_pids(proc.pid))
            rows = out / "requests.jsonl"
            if rows.is_file() and rows.read_text().count("\n") >= 2:
                break
            time.sleep(1.0)
        assert proc.poll() is None, f"bench exited early: {proc.stderr.read().decode()[-2000:]}"
        seen |= set(descendant_pids(proc.pid))
        assert len(seen) >= 6, f"expected 2 SGLang servers with their children, saw {len(seen)} processes"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(1.0)
    left = sorted(p for p in seen if alive(p))
    assert not left, f"processes left after SIGINT: {left}"
    assert json.loads((out / "requests.jsonl").read_text().splitlines()[0])["finish_reason"] in ("stop", "length")
