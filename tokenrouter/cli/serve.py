"""`tokenrouter serve [hydra overrides]`: the OpenAI-compatible HTTP server over a model set and algorithm.

The config is composed with Hydra from conf/ (or `--config-path/--config-name`): `models`, `algorithm`,
`runtime`, `seed` and `server.*` (host, port, max_body_bytes, shutdown_timeout_s, log_level, model_name).
`server.port=0` takes any free port. Once the subservers are up and the socket listens, one line
`tokenrouter serve: ready on http://HOST:PORT ...` goes to stdout (scripts wait for it).

SIGINT/SIGTERM: stop accepting connections, let in-flight requests finish for up to
`server.shutdown_timeout_s`, close the front end (every subserver process and socket file) and exit 0.
A second SIGINT forces the exit (the front end is still closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.cli.hydra_config import compose
from tokenrouter.errors import UserError

HELP = "serve the model set over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, ...)"

SERVER_DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8000,
    "max_body_bytes": 1 << 20,
    "shutdown_timeout_s": 5.0,
    "log_level": "warning",
    "model_name": None,  # default: the model set's `models.name`
}
READY_PREFIX = "tokenrouter serve: ready on "


def _parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="tokenrouter serve",
        description=HELP + ". Configured with Hydra overrides, e.g. `tokenrouter serve models=sim-r2r "
        "algorithm=bernoulli algorithm.route_prob=0.2 server.port=8080`. Keys: models=..., algorithm=..., "
        "runtime.*, seed, server.host (default 127.0.0.1), server.port (0 = any free port), "
        "server.max_body_bytes, server.shutdown_timeout_s, server.log_level, server.model_name.",
    )
    p.add_argument("-cp", "--config-path", type=Path, default=None,
                   help="directory of the primary config (default: the project's conf/)")
    p.add_argument("-cn", "--config-name", default="config", help="primary config name (default: config)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides (key=value, group=option)")
    return p


def server_options(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    node = cfg.get("server")
    given = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    if not isinstance(given, dict):
        raise UserError("server: expected a mapping")
    unknown = sorted(set(given) - set(SERVER_DEFAULTS))
    if unknown:
        raise UserError(f"server: unknown field(s) {unknown}; known: {sorted(SERVER_DEFAULTS)}")
    opts = {**SERVER_DEFAULTS, **given}
    if not isinstance(opts["port"], int) or not 0 <= opts["port"] <= 65535:
        raise UserError(f"server.port must be an integer in [0, 65535], got {opts['port']!r}")
    if not isinstance(opts["max_body_bytes"], int) or opts["max_body_bytes"] < 1:
        raise UserError(f"server.max_body_bytes must be a positive integer, got {opts['max_body_bytes']!r}")
    return opts


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts so `port=0` can be reported."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UserError(f"server.host {host!r}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only then (else Nagle + delayed
    # ACK add ~40 ms to every small response)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _make_server(app: Any, opts: dict[str, Any]) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            """Graceful shutdown on SIGINT/SIGTERM (second SIGINT forces), without uvicorn's re-raising of
            the signal afterwards: the caller still has to close the front end and exit normally."""
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.handle_exit, sig, None)
            try:
                yield
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)

    config = uvicorn.Config(app, log_level=opts["log_level"], access_log=False, lifespan="on",
                            timeout_graceful_shutdown=float(opts["shutdown_timeout_s"]))
    return Server(config)


def _tokenizer(entry: Any) -> Any:
    """The entry model's tokenizer (text prompts, chat templates); None for weightless sim engines."""
    if entry.engine == "sim":
        return None
    from tokenrouter.engine.loader import load_tokenizer

    return load_tokenizer(entry.source)


async def serve(cfg: Any, opts: dict[str, Any], sock: socket.socket) -> int:
    """Start the front end, then uvicorn on the bound socket; close the front end however serving ends."""
    from tokenrouter.config import AlgorithmSpec, RuntimeConfig, model_specs, seed_value
    from tokenrouter.runtime.frontend import TokenRouterFrontend
    from tokenrouter.runtime.http_server import ServerOptions, create_app

    models = model_specs(cfg.models)
    algorithm = AlgorithmSpec.from_dict(cfg.get("algorithm"))
    names = [m.name for m in models]
    runtime = RuntimeConfig.from_dict(cfg.get("runtime"))
    name = opts["model_name"] or str(cfg.models.get("name") or "+".join(names))
    frontend = TokenRouterFrontend(models, algorithm, runtime, seed=seed_value(cfg.get("seed", 0)))
    try:  # the entry model's tokenizer loads while the subservers start
        tokenizer, _ = await asyncio.gather(asyncio.to_thread(_tokenizer, models[0]), frontend.start())
        app = create_app(frontend, tokenizer, ServerOptions(name, max_body_bytes=opts["max_body_bytes"]),
                         manage_frontend=False)
        server = _make_server(app, opts)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            host, port = sock.getsockname()[:2]
            print(f"{READY_PREFIX}http://{host}:{port} (model {name!r}: {names}, "
                  f"algorithm {algorithm.name}; thresholds: {frontend.thresholds_source})", flush=True)
        await task
    finally:
        await frontend.close()
    return 0


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    cfg = compose(args.overrides, args.config_path, args.config_name)
    opts = server_options(cfg)
    sock = bind(opts["host"], opts["port"])  # a busy port fails here, before any model loads
    try:
        return asyncio.run(serve(cfg, opts, sock))
    except KeyboardInterrupt:  # Ctrl-C while starting up: the front end was closed on the way out
        print("tokenrouter serve: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from tokenrouter.runtime.frontend import RuntimeFailure

        if not isinstance(exc, RuntimeFailure):
            raise
        print(f"tokenrouter serve: error: {exc}", file=sys.stderr)  # a model failed to start or died
        return 1
    finally:
        sock.close()
