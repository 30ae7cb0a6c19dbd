"""`tokenrouter serve [hydra overrides]`: the OpenAI-compatible HTTP server over a model set and algorithm.

The config is composed with Hydra from conf/ (or `--config-path/--config-name`): `models`, `algorithm`,
`runtime`, `seed` and `server.*` (see SERVER_DEFAULTS: host, port, limits, timeouts, log_level, model_name).
`server.port=0` takes any free port. Once the subservers are up and the socket listens, one line
`tokenrouter serve: ready on http://HOST:PORT ...` goes to stdout (scripts wait for it).

Limits against slow or greedy clients: request headers must arrive within `header_timeout_s` (else the
connection is closed), a body within `body_timeout_s` (else 408), an idle keep-alive connection closes after
`keep_alive_timeout_s`, and past `max_connections` open connections uvicorn answers 503.

`server.api_key` (or the environment variable TOKENROUTER_API_KEY; the config wins), as vLLM's --api-key:
every /v1/*, /generate, /tokenize and /detokenize request then needs `Authorization: Bearer <key>` (else
401); /health, /metrics and /version stay open for probes and scrapers.

SIGINT/SIGTERM: stop accepting connections, let in-flight requests finish for up to
`server.shutdown_timeout_s`, then end the rest in-band (JSON 503, or an SSE error event and [DONE]), close
the front end (every subserver process and socket file) and exit 0. A second SIGINT forces the exit (the
front end is still closed). A subserver that dies turns `/health` into 503 at once, fails the in-flight
requests (503), and the server stops and exits 1 with one line naming the model: a supervisor (systemd,
Kubernetes, a sweep) restarts it; a half-dead server never keeps answering. A routing algorithm that fails
requests (a plugin bug, a route() over runtime.route_timeout_s) fails only those (500) and `/health` says
`degraded` (still 200) for a minute after; one whose constructor raises stops serve with one line (exit 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenrouter import event_loop
from tokenrouter.cli.args import ArgumentParser
from tokenrouter.cli.hydra_config import compose, with_config_dirs
from tokenrouter.errors import UserError

HELP = "serve the model set over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, ...)"

SERVER_DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8000,
    "max_body_bytes": 1 << 20,  # larger bodies: 413
    "max_prompt_tokens": 1 << 20,  # longer prompts: 413 (prompts longer than the model context: 400)
    "max_connections": 1024,  # open connections beyond this: 503 (uvicorn's limit_concurrency)
    "header_timeout_s": 10.0,  # request headers incomplete by then: connection closed
    "body_timeout_s": 30.0,  # request body incomplete by then: 408
    "keep_alive_timeout_s": 5.0,  # an idle keep-alive connection closes after this
    "shutdown_timeout_s": 5.0,  # SIGINT/SIGTERM: in-flight requests may still finish for this long
    "log_level": "warning",
    "model_name": None,  # default: the model set's `models.name`
    "api_key": None,  # default: $TOKENROUTER_API_KEY; unset: no authentication
    "http": "httptools",  # the HTTP/1.1 parser: httptools (C) or h11 (pure Python); server/connection.py
}
API_KEY_ENV = "TOKENROUTER_API_KEY"
_POSITIVE_INTS = ("max_body_bytes", "max_prompt_tokens", "max_connections")
_SECONDS = {"header_timeout_s": False, "body_timeout_s": False, "keep_alive_timeout_s": False,
            "shutdown_timeout_s": True}  # key -> whether 0 is allowed
# uvicorn cancels handlers still running this long after the shutdown grace: the in-band ending of every
# request (when the grace ends) normally finishes them well before.
_SHUTDOWN_BACKSTOP_S = 5.0


def _parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="tokenrouter serve",
        description=HELP + ". Configured with Hydra overrides, e.g. `tokenrouter serve models=sim-r2r "
        "algorithm=bernoulli algorithm.route_prob=0.2 server.port=8080`. Keys: models=..., algorithm=..., "
        "runtime.*, seed, server.host (default 127.0.0.1), server.port (0 = any free port), "
        "server.max_body_bytes, server.max_prompt_tokens, server.max_connections, server.header_timeout_s, "
        "server.body_timeout_s, server.keep_alive_timeout_s, server.shutdown_timeout_s, server.log_level, "
        f"server.model_name, server.api_key (default ${API_KEY_ENV}), server.http (httptools or h11).",
    )
    p.add_argument("-cp", "--config-path", type=Path, default=None,
                   help="directory of the primary config (default: the project's conf/)")
    p.add_argument("-cn", "--config-name", default="config", help="primary config name (default: config)")
    p.add_argument("-cd", "--config-dir", type=Path, action="append", default=None,
                   help="an extra config dir searched for config groups (repeatable; hydra.searchpath)")
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
    for key in _POSITIVE_INTS:
        if not isinstance(opts[key], int) or isinstance(opts[key], bool) or opts[key] < 1:
            raise UserError(f"server.{key} must be a positive integer, got {opts[key]!r}")
    for key, zero_ok in _SECONDS.items():
        value = opts[key]
        if not (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
                and (value > 0 or (zero_ok and value == 0))):
            raise UserError(f"server.{key} must be a finite number of seconds {'>= 0' if zero_ok else '> 0'}, "
                            f"got {value!r}")
    from tokenrouter.server.connection import PARSERS

    if opts["http"] not in PARSERS:
        raise UserError(f"server.http must be one of {', '.join(PARSERS)}, got {opts['http']!r}")
    if opts["api_key"] is None:
        opts["api_key"] = os.environ.get(API_KEY_ENV) or None
    if opts["api_key"] is not None and (not isinstance(opts["api_key"], str) or not opts["api_key"].strip()):
        raise UserError(f"server.api_key must be a non-empty string, got {opts['api_key']!r}")
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


def _make_server(app: Any, opts: dict[str, Any], frontend: Any) -> Any:
    import uvicorn

    from tokenrouter.server.connection import with_header_timeout

    grace = float(opts["shutdown_timeout_s"])

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

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            """Once the grace is over, close the front end: that ends every request still in flight in-band
            (JSON 503, or an SSE error event and [DONE]), so uvicorn never cancels a handler (which answers a
            plain-text 500 or cuts the stream, and logs a traceback each)."""
            loop = asyncio.get_running_loop()
            closing: list[asyncio.Task] = []
            timer = loop.call_later(grace, lambda: closing.append(loop.create_task(frontend.close())))
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()
                if closing:  # never interrupt a close half-way: subservers would outlive us
                    await closing[0]

    config = uvicorn.Config(app, log_level=opts["log_level"], access_log=False, lifespan="on",
                            http=with_header_timeout(opts["http"], opts["header_timeout_s"]),
                            limit_concurrency=opts["max_connections"],
                            timeout_keep_alive=opts["keep_alive_timeout_s"],
                            timeout_graceful_shutdown=grace + _SHUTDOWN_BACKSTOP_S)
    return Server(config)


def _text_setup(models: list[Any]) -> tuple[Any, int | None]:
    """The entry model's tokenizer (text prompts, chat templates; None for weightless sim engines) and the
    shortest context of the members with weights (None if all are sim): every member sees the whole prompt."""
    from tokenrouter.engine.loader import load_config, load_tokenizer

    weighted = [m for m in models if m.engine != "sim"]
    tokenizer = load_tokenizer(models[0].source) if models[0].engine != "sim" else None
    contexts = [getattr(load_config(m.source), "max_position_embeddings", None) for m in weighted]
    known = [c for c in contexts if isinstance(c, int)]
    return tokenizer, (min(known) if known else None)


async def serve(cfg: Any, opts: dict[str, Any], sock: socket.socket) -> int:
    """Start the front end, then uvicorn on the bound socket; close the front end however serving ends."""
    from tokenrouter.config import AlgorithmSpec, RuntimeConfig, model_specs, seed_value
    from tokenrouter.heap import freeze_startup
    from tokenrouter.runtime.frontend import RuntimeFailure, TokenRouterFrontend
    from tokenrouter.server.app import ServerOptions, create_app
    from tokenrouter.server.ready import ready_line

    models = model_specs(cfg.models)
    algorithm = AlgorithmSpec.from_dict(cfg.get("algorithm"))
    names = [m.name for m in models]
    runtime = RuntimeConfig.from_dict(cfg.get("runtime"))
    name = opts["model_name"] or str(cfg.models.get("name") or "+".join(names))
    frontend = TokenRouterFrontend(models, algorithm, runtime, seed=seed_value(cfg.get("seed", 0)))
    try:  # the entry model's tokenizer loads while the subservers start
        (tokenizer, context), _ = await asyncio.gather(asyncio.to_thread(_text_setup, models), frontend.start())
        options = ServerOptions(name, max_body_bytes=opts["max_body_bytes"],
                                max_prompt_tokens=opts["max_prompt_tokens"], context_length=context,
                                body_timeout_s=float(opts["body_timeout_s"]), api_key=opts["api_key"])
        app = create_app(frontend, tokenizer, options, manage_frontend=False)
        server = _make_server(app, opts, frontend)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            freeze_startup()  # the tokenizer, the app: out of the cyclic GC's full collections
            host, port = sock.getsockname()[:2]
            print(ready_line(f"http://{host}:{port}", f"model {name!r}: {names}, algorithm {algorithm.name}; "
                                                      f"thresholds: {frontend.thresholds_source}"), flush=True)
        closed = asyncio.create_task(frontend.wait_closed())
        await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():  # the runtime died under a running server: stop serving 503s, exit non-zero
            server.should_exit = True
            await task
        closed.cancel()
    finally:
        await frontend.close()
        if runtime.trace:
            write_serve_trace(frontend, Path(runtime.trace_file))
    if frontend.failure is not None:
        raise RuntimeFailure(frontend.failure)
    return 0


def write_serve_trace(frontend: Any, path: Path) -> None:
    """runtime.trace: what the server did, as trace.json at `path` (written at shutdown, whatever ended it)."""
    from tokenrouter.trace.chrome import write_chrome_trace

    trace = frontend.trace_log()
    write_chrome_trace(path, trace, frontend.model_names, "tokenrouter", trace.requests)  # streamed: never whole
    print(f"tokenrouter serve: trace of {len(trace.batches)} batches, {len(trace.requests)} requests -> {path}",
          file=sys.stderr)


def run(argv: list[str]) -> int:
    args = _parser().parse_intermixed_args(argv)
    cfg = compose(with_config_dirs(args.overrides, args.config_dir), args.config_path, args.config_name)
    from tokenrouter.config import model_specs
    from tokenrouter.evals.preconditions import missing_devices

    missing = missing_devices(model_specs(cfg.models))  # before any download: its retries take a minute
    if missing:
        raise UserError(missing[0])
    opts = server_options(cfg)
    sock = bind(opts["host"], opts["port"])  # a busy port fails here, before any model loads
    try:
        return event_loop.run(serve(cfg, opts, sock))
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
