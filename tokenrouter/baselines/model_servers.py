"""Independent single-model HTTP servers as real subprocesses, for the baselines that query servers.

Two kinds behind one handle: `tokenrouter serve` with one model and algorithm `stay`, or a real SGLang server
(`python -m sglang.launch_server` from SGLang's own venv, tokenrouter/baselines/sglang_server.py; CPU or GPU). Both
answer the same SGLang-style `POST /generate` (input_ids + sampling_params -> output_ids + meta_info).

Our servers bind port 0 and report the port in their ready line, so there is no free-port race; SGLang gets
a port probed free just before launch. Each server is the leader of its own process group (SGLang forks a
scheduler and a detokenizer): it gets SIGTERM when this process dies (Linux parent-death signal, and SGLang's
children die with it), and `close()` signals the whole group (SIGTERM, then SIGKILL after a grace period):
no orphans.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx

from tokenrouter.baselines.sglang_server import SGLangServerOptions, sglang_command
from tokenrouter.children import die_with_parent
from tokenrouter.config import ModelSpec, RuntimeConfig
from tokenrouter.errors import UserError
from tokenrouter.server.ready import ready_url

KINDS = ("tokenrouter", "sglang")
STOP_GRACE_S = 15.0


@dataclass
class ModelServer:
    """A running single-model server process and where it listens."""

    name: str
    url: str
    proc: asyncio.subprocess.Process
    log_path: Path
    drain: asyncio.Task | None = None

    kind: str = "tokenrouter"

    async def close(self) -> None:
        """Stop the server and everything it started (its process group). Idempotent."""
        if self.proc.returncode is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                _signal_group(self.proc.pid, signal.SIGKILL)
                await self.proc.wait()
        # The leader is gone; a child still in its group (a forked worker that ignored SIGTERM) goes now.
        _signal_group(self.proc.pid, signal.SIGKILL)
        if self.drain is not None:
            self.drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.drain


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _spawn(cmd: list[str], log_path: Path, env: dict[str, str] | None = None,
                 stdout_pipe: bool = False) -> asyncio.subprocess.Process:
    """A server process leading its own process group, stderr (and stdout unless piped) to `log_path`."""
    with log_path.open("wb") as log:
        return await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE if stdout_pipe else log, stderr=log,
            stdin=asyncio.subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=die_with_parent)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


async def launch_tokenrouter(spec: ModelSpec, runtime: RuntimeConfig, seed: int, workdir: Path, index: int,
                             timeout_s: float) -> ModelServer:
    """`tokenrouter serve` over `spec` alone with algorithm `stay`, configured by a file in `workdir`."""
    stem = f"server{index}"
    # one model: batch whatever is ready; runtime.trace: the server writes its trace here at shutdown
    rt = replace(runtime, thresholds=[1], trace_file=str(trace_path(workdir, index)))
    config = {
        "models": {"name": spec.name, "members": [spec.to_dict()]},
        "algorithm": {"name": "stay"},
        "runtime": asdict(rt),
        "seed": seed,
        "server": {"host": "127.0.0.1", "port": 0, "log_level": "warning", "model_name": spec.name},
    }
    (workdir / f"{stem}.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
    log_path = workdir / f"{stem}.log"
    proc = await _spawn([sys.executable, "-m", "tokenrouter", "serve", "-cp", str(workdir), "-cn", stem],
                        log_path, stdout_pipe=True)
    assert proc.stdout is not None
    try:
        url = await asyncio.wait_for(_ready_url(proc.stdout), timeout_s)
    except (TimeoutError, EOFError) as exc:
        if isinstance(exc, EOFError):  # it closed its stdout: it is exiting on its own, let it finish
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        await ModelServer(spec.name, "", proc, log_path).close()
        why = f"exited with code {proc.returncode}" if isinstance(exc, EOFError) else \
            f"was not ready after {timeout_s:g} s"
        raise UserError(f"std_serving: server for model {spec.name!r} {why}: {_log_tail(log_path)}") from None
    return ModelServer(spec.name, url, proc, log_path, asyncio.create_task(_discard(proc.stdout)))


def trace_path(workdir: Path, index: int) -> Path:
    """Where our server `index` writes its trace.json (runtime.trace) when it stops."""
    return workdir / f"server{index}.trace.json"


async def _ready_url(stdout: asyncio.StreamReader) -> str:
    while True:
        line = (await stdout.readline()).decode(errors="replace")
        if not line:
            raise EOFError
        url = ready_url(line)
        if url is not None:
            return url


async def _discard(stdout: asyncio.StreamReader) -> None:
    """Keep reading the server's stdout so a chatty server never blocks on a full pipe."""
    while await stdout.read(65536):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def launch_sglang(spec: ModelSpec, seed: int, workdir: Path, index: int, hidden_states: bool,
                        opts: SGLangServerOptions) -> ModelServer:
    """A real SGLang server for `spec` (its model source as a Hub id or local directory), ready when /health
    answers 200 (SGLang answers 503 until its warm-up request has run)."""
    from tokenrouter.engine.loader import loadable_source

    src = loadable_source(spec.source)  # a downloaded Hub id: its local snapshot (no Hub lookups at start-up)
    if src.gguf_file:
        raise UserError(f"SGLang server: model {spec.name!r} is a GGUF file ({spec.source}); SGLang loads HF weights")
    if spec.device != "cpu":
        from tokenrouter.engine.sglang_args import SGLANG_CUDA, driver_problem, nvidia_driver_version

        problem = driver_problem(SGLANG_CUDA, nvidia_driver_version())
        if problem is not None:
            raise UserError(f"SGLang server for model {spec.name!r}: {problem}")
    port = _free_port()
    cmd, env = sglang_command(spec, src.location, port, seed, hidden_states, opts)
    log_path = workdir / f"sglang{index}.log"
    proc = await _spawn(cmd, log_path, env)
    server = ModelServer(spec.name, f"http://127.0.0.1:{port}", proc, log_path, kind="sglang")
    deadline = time.monotonic() + opts.startup_timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.monotonic() < deadline and proc.returncode is None:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{server.url}/health")).status_code == 200:
                    return server
            await asyncio.sleep(0.5)
    code = proc.returncode
    await server.close()
    why = f"exited with code {code}" if code is not None else f"was not ready after {opts.startup_timeout_s:g} s"
    raise UserError(f"SGLang server for model {spec.name!r} {why}: {_log_tail(log_path)}")
