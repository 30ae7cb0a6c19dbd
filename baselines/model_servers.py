"""Independent single-model HTTP servers as real subprocesses, for the Std. Serving baseline.

Two kinds behind one handle: `tokenrouter serve` with one model and algorithm `stay` (any machine), or an
SGLang server (`python -m sglang.launch_server`, GPU machines with SGLang installed). Both answer the same
SGLang-style `POST /generate` (input_ids + sampling_params -> output_ids + meta_info).

Our servers bind port 0 and report the port in their ready line, so there is no free-port race; SGLang gets
a port probed free just before launch. Every server gets SIGTERM when this process dies (Linux parent-death
signal), and `close()` terminates it (SIGTERM, then SIGKILL after a grace period): no orphans.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx

from tokenrouter.children import die_with_parent
from tokenrouter.config import ModelSpec, RuntimeConfig
from tokenrouter.errors import UserError
from tokenrouter.runtime.http_ready import ready_url

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

    async def close(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        if self.drain is not None:
            self.drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.drain


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


async def launch_tokenrouter(spec: ModelSpec, runtime: RuntimeConfig, seed: int, workdir: Path, index: int,
                             timeout_s: float) -> ModelServer:
    """`tokenrouter serve` over `spec` alone with algorithm `stay`, configured by a file in `workdir`."""
    rt = replace(runtime, thresholds=[1])  # one model: batch whatever is ready
    config = {
        "models": {"name": spec.name, "members": [spec.to_dict()]},
        "algorithm": {"name": "stay"},
        "runtime": asdict(rt),
        "seed": seed,
        "server": {"host": "127.0.0.1", "port": 0, "log_level": "warning", "model_name": spec.name},
    }
    stem = f"server{index}"
    (workdir / f"{stem}.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
    log_path = workdir / f"{stem}.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tokenrouter", "serve", "-cp", str(workdir), "-cn", stem,
            stdout=asyncio.subprocess.PIPE, stderr=log, stdin=asyncio.subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
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


async def launch_sglang(spec: ModelSpec, seed: int, workdir: Path, index: int, timeout_s: float,
                        hidden_states: bool, extra_args: list[str]) -> ModelServer:
    """An SGLang server for `spec` (its model source as a Hub id or local directory), ready when /health
    answers 200."""
    if importlib.util.find_spec("sglang") is None:
        raise UserError("std_serving: system.server=sglang needs SGLang installed (pip install 'sglang[all]', "
                        "GPU machines); use system.server=tokenrouter otherwise")
    if spec.engine == "sim":
        raise UserError(f"std_serving: model {spec.name!r} is a sim engine; SGLang serves real weights only")
    from tokenrouter.engine.loader import resolve_source

    src = resolve_source(spec.source)
    if src.gguf_file:
        raise UserError(f"std_serving: SGLang does not load GGUF files ({spec.source})")
    port = _free_port()
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", src.location, "--host", "127.0.0.1",
           "--port", str(port), "--tp-size", str(spec.tp), "--dtype", spec.dtype, "--random-seed", str(seed)]
    if spec.mem_fraction is not None:
        cmd += ["--mem-fraction-static", str(spec.mem_fraction)]
    if hidden_states:
        cmd += ["--enable-return-hidden-states"]
    cmd += list(extra_args)
    log_path = workdir / f"sglang{index}.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL,
                                                    preexec_fn=die_with_parent)
    server = ModelServer(spec.name, f"http://127.0.0.1:{port}", proc, log_path)
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.monotonic() < deadline and proc.returncode is None:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{server.url}/health")).status_code == 200:
                    return server
            await asyncio.sleep(1.0)
    await server.close()
    raise UserError(f"std_serving: SGLang server for {spec.name!r} did not become ready "
                    f"(exit code {proc.returncode}): {_log_tail(log_path)}")
