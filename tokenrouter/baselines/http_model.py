"""One model behind its own HTTP server (a real SGLang server, or `tokenrouter serve`), each request sent
whole to its SGLang-style `POST /generate` and read back as a stream.

Why: the paper's single-model and query-level baselines ran on SGLang itself, so `system=single` and
`system=query_routing` take `server: sglang` to measure the real system they stand for; this is the client
side they share, also used by Std. Serving for one token at a time (`generate_body`, `server_error`).
Streaming gives the same per-commit timestamps as every other system (TTFT, ITL in requests.jsonl).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tokenrouter.baselines.model_servers import KINDS, ModelServer, launch_sglang, launch_tokenrouter
from tokenrouter.baselines.sglang_server import SGLangServerOptions, scheduler_stages
from tokenrouter.config import ModelSpec, RuntimeConfig
from tokenrouter.engine.base import SamplingParams
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.runtime.ipc import private_dir, remove_dir
from tokenrouter.system import ServingSystem

_FINISH = {"stop": "stop", "length": "length"}  # SGLang meta_info.finish_reason.type -> ours ("abort": error)


def generate_body(tokens: list[int], sampling: SamplingParams, max_new_tokens: int, stop_ids: set[int] | list[int],
                  min_new_tokens: int = 0) -> dict[str, Any]:
    """An SGLang `/generate` body asking for up to `max_new_tokens` after `tokens`, stopping at `stop_ids`."""
    params: dict[str, Any] = {"max_new_tokens": max_new_tokens, "temperature": sampling.temperature,
                              "top_p": sampling.top_p, "top_k": sampling.top_k if sampling.top_k > 0 else -1,
                              "stop_token_ids": sorted(stop_ids)}
    if sampling.seed is not None:
        params["sampling_seed"] = sampling.seed
    if min_new_tokens > 0:
        params["min_new_tokens"] = min_new_tokens
    return {"input_ids": list(tokens), "sampling_params": params}


def http_client(timeout_s: float) -> httpx.AsyncClient:
    """A client for many concurrent requests to a few servers (no pool limit: N closed-loop clients)."""
    return httpx.AsyncClient(timeout=timeout_s, limits=httpx.Limits(max_connections=None, max_keepalive_connections=256))


async def stop_servers(client: httpx.AsyncClient | None, servers: list[ModelServer], workdir: Path | None,
                       stopped: Callable[[Path], None] | None = None) -> None:
    """Close the client, stop every server (no process left), call `stopped(workdir)` (read what the servers
    wrote at shutdown) and remove their config/log directory."""
    if client is not None:
        await client.aclose()
    await asyncio.gather(*(s.close() for s in servers))
    try:
        if stopped is not None and workdir is not None:
            stopped(workdir)
    finally:
        remove_dir(workdir)


def server_error(model: str, resp: httpx.Response, where: str = "") -> Exception:
    """One line (after `where`, e.g. "std_serving: ") naming the model and what its server said; a 4xx is the
    request's fault (UserError)."""
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text[:300]
    text = f"{where}model {model!r} server answered {resp.status_code}: {message}"
    return UserError(text) if 400 <= resp.status_code < 500 else RuntimeError(text)


async def start_server(kind: str, spec: ModelSpec, runtime: RuntimeConfig, seed: int, workdir: Path, index: int,
                       sglang: SGLangServerOptions, hidden_states: bool = False,
                       startup_timeout_s: float | None = None) -> ModelServer:
    """Start one model's server of `kind` (tokenrouter | sglang) and wait until it serves."""
    if kind == "sglang":
        return await launch_sglang(spec, seed, workdir, index, hidden_states, sglang)
    return await launch_tokenrouter(spec, runtime, seed, workdir, index, startup_timeout_s or sglang.startup_timeout_s)


async def server_eos_ids(server: ModelServer, spec: ModelSpec, client: httpx.AsyncClient) -> list[int]:
    """The model's EOS ids (stop tokens by default, as in TokenRouter): our /v1/models reports them; for
    SGLang, the model's own generation config / tokenizer."""
    if server.kind == "tokenrouter":
        models = (await client.get(f"{server.url}/v1/models")).json()
        return list(models["data"][0].get("eos_token_ids") or [])
    from tokenrouter.engine.loader import load_tokenizer

    tok = load_tokenizer(spec.source)
    return [] if tok is None or tok.eos_token_id is None else [int(tok.eos_token_id)]


def sglang_stage_stats(server: ModelServer, baseline: dict[str, float] | None = None) -> dict[str, float] | None:
    """SGLang's scheduler stage seconds and forward passes from its /metrics (minus `baseline`); None for
    our servers or when unreachable."""
    if server.kind != "sglang":
        return None
    try:
        stages = scheduler_stages(httpx.get(f"{server.url}/metrics", timeout=5.0).text)
    except httpx.HTTPError:
        return None
    return {k: v - (baseline or {}).get(k, 0.0) for k, v in stages.items()}


class HttpModelSystem(ServingSystem):
    """One model on its own server; requests go whole to /generate (streamed). See the module docstring."""

    def __init__(self, spec: ModelSpec, runtime: RuntimeConfig, seed: int = 0, server: str = "sglang",
                 sglang: SGLangServerOptions | None = None, request_timeout_s: float = 600.0) -> None:
        if server not in KINDS:
            raise UserError(f"server must be one of {KINDS}, got {server!r}")
        self.spec, self.runtime, self.seed, self.kind = spec, runtime, seed, server
        self.model_names = [spec.name]
        self.sglang = sglang or SGLangServerOptions()
        self.request_timeout_s = request_timeout_s
        self.server: ModelServer | None = None
        self.eos_ids: list[int] = []
        self._client: httpx.AsyncClient | None = None
        self._dir: Path | None = None
        self._requests = self._tokens = 0
        self._baseline: dict[str, float] | None = None

    async def start(self) -> None:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self._dir = private_dir()
        try:
            self.server = await start_server(self.kind, self.spec, self.runtime, self.seed, self._dir, 0, self.sglang)
            self._client = http_client(self.request_timeout_s)
            self.eos_ids = await server_eos_ids(self.server, self.spec, self._client)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        client, server, workdir = self._client, self.server, self._dir
        self._client, self.server, self._dir = None, None, None
        await stop_servers(client, [server] if server else [], workdir)

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        if self._client is None or self.server is None:
            raise RuntimeError("http model system is not running (call start() first)")
        if not req.prompt_ids:
            raise UserError("request has an empty prompt")
        stop = self.eos_ids if req.stop_token_ids is None else req.stop_token_ids
        body = generate_body(req.prompt_ids, req.sampling, req.max_new_tokens, set(stop), req.min_new_tokens)
        body["stream"] = True
        arrival = time.perf_counter()
        out: list[int] = []
        commits: list[tuple[float, int, str]] = []
        reason = ""
        async with self._client.stream("POST", f"{self.server.url}/generate", json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
                raise server_error(self.spec.name, resp)
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"model {self.spec.name!r} server failed mid-stream: {chunk['error']}")
                ids = [int(t) for t in chunk.get("output_ids") or []]  # cumulative (SGLang's default stream)
                if len(ids) > len(out):
                    commits.append((time.perf_counter(), len(ids) - len(out), self.spec.name))
                    out = ids
                finish = (chunk.get("meta_info") or {}).get("finish_reason")
                if finish:
                    kind = finish.get("type") if isinstance(finish, dict) else str(finish)
                    reason = _FINISH.get(kind, "error")
        if not reason:
            raise RuntimeError(f"model {self.spec.name!r} server ended the stream without a finish reason")
        self._requests += 1
        self._tokens += len(out)
        return GenerationResult(
            index=req.index, prompt_ids=list(req.prompt_ids), output_ids=out, finish_reason=reason,
            tokens_per_model={self.spec.name: len(out)}, arrival_s=arrival,
            first_token_s=commits[0][0] if commits else None, finish_s=time.perf_counter(), commits=commits,
            error=None if reason != "error" else f"model {self.spec.name!r} server aborted the request",
        )

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"system": "http_model", "server": self.kind, "requests": self._requests,
                                 "tokens": self._tokens}
        if self.server is not None:
            stages = sglang_stage_stats(self.server, self._baseline)
            if stages is not None:
                stats["sglang"] = stages
        return stats

    def reset_stats(self) -> None:
        """Measure afresh from here (after a warm-up)."""
        self._requests = self._tokens = 0
        self._baseline = sglang_stage_stats(self.server) if self.server is not None else None
