"""The OpenAI-compatible HTTP server over a TokenRouter front end (FastAPI; run by `tokenrouter serve`).

Endpoints: `/v1/completions` and `/v1/chat/completions` (JSON or SSE stream, OpenAI shapes incl. `usage`,
stop strings), `/v1/models`, `/health`, `/metrics` (Prometheus, vLLM-style names), `/version`, vLLM's
`/tokenize` and `/detokenize`, and a native SGLang-style `/generate` (token ids or text in, token ids out, an
SSE stream of cumulative text with `stream: true`, optionally the last step's logits and hidden state) that
the Std. Serving baseline drives. With `api_key` set, everything but `/health`, `/metrics` and `/version`
needs `Authorization: Bearer <key>`.

Why the body is read by hand rather than through FastAPI's pydantic parameters: oversize bodies must be cut
off while reading (413, before the whole body is buffered), a slow body must time out (408), and every client
error must come back as OpenAI-style JSON with status 400, not FastAPI's 422 shape. The request models still
appear in the published OpenAPI document (`/openapi.json`, `/docs`; see openapi.py).

Hostile input stays a 4xx: protocol.py validates strictly, text work runs off the event loop (text.py),
and a request whose client leaves is aborted, streamed or not. A server-side failure is a 5xx whose message is
one line without file paths (`_public`): tracebacks go to the server's stderr, never to clients. A request the
routing algorithm failed is a 500 `server_error` (never the client's 400); the server goes on, and `/health`
says `degraded` (still 200) while such failures are recent.
"""

from __future__ import annotations

import asyncio
import hmac
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from tokenrouter import __version__
from tokenrouter.api import AlgorithmFailure
from tokenrouter.engine.base import SamplingParams
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.server import openapi
from tokenrouter.server.frontend_api import FrontEnd, FrontEndEvent
from tokenrouter.server.metrics import ServerMetrics
from tokenrouter.server.output import Output
from tokenrouter.server.protocol import (
    REQUEST_MODELS,
    ApiError,
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    GenerateRequest,
    OpenAISampling,
    StreamOptions,
    TokenizeRequest,
    native_meta,
    new_id,
    parse_json,
    response_body,
    running_usage,
    sse,
    stream_chunk,
    usage_chunk,
    validate,
)
from tokenrouter.server.text import TextCodec

T = TypeVar("T")

DEFAULT_MAX_BODY_BYTES = 1 << 20
DESCRIPTION = ("OpenAI-compatible completions and chat completions (JSON or SSE) over a TokenRouter model set, "
               "plus an SGLang-style `/generate`. Request bodies are validated strictly: unknown fields, wrong "
               "types and out-of-range values get 400 naming the field.")


@dataclass
class ServerOptions:
    model_name: str  # the id clients pass as `model` (the model set's name)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_prompt_tokens: int = DEFAULT_MAX_BODY_BYTES  # longer prompts get 413
    context_length: int | None = None  # the models' context (None: unknown, sim engines); longer prompts get 400
    body_timeout_s: float = 30.0  # a body still incomplete after this gets 408
    completion_max_tokens: int = 16  # OpenAI's default for /v1/completions
    chat_max_tokens: int = 256  # default when a chat request gives no max_tokens
    api_key: str | None = None  # if set: /v1/*, /generate, /tokenize, /detokenize need it as a Bearer token


class HttpServer:
    """The request handling behind the app: validation, tokenization, generation, response shaping."""

    def __init__(self, frontend: FrontEnd, tokenizer: Any, options: ServerOptions) -> None:
        self.frontend = frontend
        self.text = TextCodec(tokenizer)
        self.opts = options
        self.metrics = ServerMetrics(options.model_name)
        self._next_index = 0
        self._rng = random.Random()

    # ---- input --------------------------------------------------------------------------------------------
    async def read_json(self, request: Request) -> dict[str, Any]:
        timeout = self.opts.body_timeout_s
        try:
            async with asyncio.timeout(timeout):
                raw = await self._read_body(request)
        except TimeoutError:
            raise ApiError(408, f"request body not received within {timeout:g} s (server.body_timeout_s)",
                           "request_timeout") from None
        return parse_json(raw)

    async def _read_body(self, request: Request) -> bytes:
        limit = self.opts.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise ApiError(400, f"invalid Content-Length header {length!r}")
            if int(length) > limit:
                raise ApiError(413, f"request body of {length} bytes exceeds the limit of {limit} bytes",
                               "request_too_large")
        body, size = bytearray(), 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"request body exceeds the limit of {limit} bytes", "request_too_large")
            body += chunk
        return bytes(body)

    def check_prompt(self, ids: list[int], param: str) -> list[int]:
        """Empty and over-long prompts are named here (the schema bounds each id to [0, 2**31); the front end
        checks the vocabulary bound, -> 400 too)."""
        if not ids:
            raise ApiError(400, f"{param!r} is empty", param=param)
        cap, context = self.opts.max_prompt_tokens, self.opts.context_length
        if len(ids) > cap:
            raise ApiError(413, f"{param!r}: prompt of {len(ids)} tokens exceeds the limit of {cap} tokens "
                                "(server.max_prompt_tokens)", "request_too_large", param=param)
        if context is not None and len(ids) > context:
            raise ApiError(400, f"{param!r}: prompt of {len(ids)} tokens is longer than the model context of "
                                f"{context} tokens", param=param)
        return ids

    def need_tokenizer(self, what: str, param: str | None = None) -> None:
        if not self.text.available:
            raise ApiError(400, f"{what} needs a tokenizer, and model set {self.opts.model_name!r} has none "
                                "(weightless sim engines); send token ids instead", param=param)

    def check_length(self, text: str, param: str) -> None:
        """A text prompt that its length alone proves too long is refused before it is tokenized (seconds of CPU
        for a 1 MB prompt), with check_prompt's status: it has at least len / chars_per_token tokens."""
        per = self.text.chars_per_token
        if per is None:
            return
        least, cap, context = -(-len(text) // per), self.opts.max_prompt_tokens, self.opts.context_length
        if least > cap:
            raise ApiError(413, f"{param!r}: prompt of {len(text)} characters has at least {least} tokens, over "
                                f"the limit of {cap} tokens (server.max_prompt_tokens)", "request_too_large",
                           param=param)
        if context is not None and least > context:
            raise ApiError(400, f"{param!r}: prompt of {len(text)} characters has at least {least} tokens, "
                                f"longer than the model context of {context} tokens", param=param)

    async def encode_text(self, text: str, param: str) -> list[int]:
        self.need_tokenizer("a text prompt")
        self.check_length(text, param)
        return self.check_prompt(await self.text.encode(text), param)

    async def prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            if len(prompt) != 1:
                raise ApiError(400, f"'prompt' holds {len(prompt)} prompts; send one prompt per request",
                               param="prompt")
            prompt = prompt[0]
        if isinstance(prompt, str):
            return await self.encode_text(prompt, "prompt")
        return self.check_prompt(list(prompt), "prompt")

    async def chat_ids(self, messages: list[ChatMessage], template_kwargs: dict[str, Any] | None,
                       add_generation_prompt: bool = True) -> list[int]:
        self.need_tokenizer("a chat request")
        turns = [{"role": m.role, "content": m.text()} for m in messages]
        try:
            ids = await self.text.chat(turns, add_generation_prompt, template_kwargs or {})
        except Exception as exc:  # jinja errors of a model's own template: the client's messages don't fit it
            raise ApiError(400, f"cannot apply the chat template to 'messages': {exc}", param="messages") from None
        return self.check_prompt(ids, "messages")

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.opts.model_name:
            raise ApiError(404, f"model {model!r} does not exist; this server serves {self.opts.model_name!r}",
                           "model_not_found", param="model")

    def request(self, ids: list[int], max_tokens: int, temperature: float, top_p: float, top_k: int,
                seed: int | None, stop_token_ids: list[int] | None, min_tokens: int = 0) -> GenerationRequest:
        """A GenerationRequest. Without a client seed the routing seed is random (sampling then unseeded)."""
        index, self._next_index = self._next_index, self._next_index + 1
        return GenerationRequest(
            prompt_ids=ids,
            max_new_tokens=max_tokens,
            sampling=SamplingParams(temperature=temperature, top_p=top_p, top_k=max(top_k, 0), seed=seed),
            seed=seed if seed is not None else self._rng.getrandbits(31),
            index=index,
            stop_token_ids=stop_token_ids,
            min_new_tokens=min_tokens,
        )

    # ---- generation ---------------------------------------------------------------------------------------
    def stops(self, stop: str | list[str] | None) -> tuple[str, ...]:
        stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
        if stops:
            self.need_tokenizer("'stop'", "stop")
        return stops

    async def submit(self, request: Request, req: GenerationRequest
                     ) -> tuple[AsyncIterator[FrontEndEvent], AsyncGenerator[FrontEndEvent, None]]:
        """The request's stream events (and the front end's generator, to close: that aborts the request).
        Waits for the first event, so a rejected request still gets its 4xx status (not an SSE error)."""
        events = self.frontend.stream(req)
        try:
            first = await until_client_leaves(request, anext(events))
        except Exception as exc:
            raise _failure(exc) from None
        return _chain(first, events), events

    async def collect(self, request: Request, out: Output) -> str:
        """A whole answer: the joined text pieces of the request's stream; a client that leaves aborts it."""
        chain, events = await self.submit(request, out.req)

        async def run() -> str:
            return "".join([piece.text async for piece in out.pieces(chain)])

        try:
            with self.metrics.in_flight():
                text = await until_client_leaves(request, run())
        except Exception as exc:
            raise _failure(exc) from None
        finally:
            await events.aclose()
        if out.result is None or out.result.finish_reason == "error":
            raise _generation_error(out.result)
        return text

    async def completions(self, request: Request, chat: bool) -> Response:
        start = time.perf_counter()
        self.authorize(request)
        data = await self.read_json(request)
        body: ChatRequest | CompletionRequest
        if chat:
            body = validate(ChatRequest, data)
            ids = await self.chat_ids(body.messages, body.chat_template_kwargs)
            max_tokens = body.max_completion_tokens or body.max_tokens or self.opts.chat_max_tokens
        else:
            body = validate(CompletionRequest, data)
            ids = await self.prompt_ids(body.prompt)
            max_tokens = body.max_tokens or self.opts.completion_max_tokens
        self.check_model(body.model)
        stops = self.stops(body.stop)
        stop_ids = [] if body.stop_token_ids is None and body.ignore_eos else body.stop_token_ids
        req = self.request(ids, max_tokens, body.temperature, body.top_p, body.top_k, body.seed, stop_ids,
                           body.min_tokens)
        rid = new_id("chatcmpl" if chat else "cmpl")
        endpoint = request.url.path
        out = Output(req, self.text, stops, start=start)
        if body.stream:
            chain, events = await self.submit(request, req)
            return _sse_response(self.openai_stream(out, chain, events, rid, chat, body, endpoint))
        text = await self.collect(request, out)
        result = out.result
        assert result is not None
        self.metrics.finished(endpoint, 200, result, out)
        return JSONResponse(response_body(rid, self.opts.model_name, chat, text, result, body.return_token_ids))

    async def openai_stream(self, out: Output, chain: AsyncIterator[FrontEndEvent],
                            events: AsyncGenerator[FrontEndEvent, None], rid: str, chat: bool,
                            body: OpenAISampling, endpoint: str) -> AsyncIterator[bytes]:
        """SSE events: (chat: a role chunk), one chunk per committed-token event (its text held back where it
        may start a stop string), a finish chunk, (usage), [DONE]; a failure is an error event, then
        [DONE]. With `continuous_usage_stats` every chunk carries the usage so far."""
        model, token_ids = self.opts.model_name, body.return_token_ids
        options = body.stream_options or StreamOptions()
        prompt = len(out.req.prompt_ids)

        def chunk(text: str | None, ids: list[int], tokens: int, **kw: Any) -> bytes:
            extra = running_usage(prompt, tokens) if options.continuous_usage_stats else None
            return sse(stream_chunk(rid, model, chat, text, ids if token_ids else None, usage=extra, **kw))

        async def body_events() -> AsyncIterator[bytes]:
            if chat:
                yield chunk("", [], 0, role=True)
            tail = ""
            async for piece in out.pieces(chain):
                if piece.token_ids:
                    yield chunk(piece.text, piece.token_ids, piece.tokens)
                else:
                    tail = piece.text
            result = out.result
            if result is None or result.finish_reason == "error":
                raise _generation_error(result)
            yield chunk(tail, [], len(result.output_ids), finish_reason=result.finish_reason)
            if options.include_usage:
                yield sse(usage_chunk(rid, model, chat, result))

        async for event in self.guarded(body_events(), out, events, endpoint):
            yield event

    async def guarded(self, stream: AsyncIterator[bytes], out: Output,
                      events: AsyncGenerator[FrontEndEvent, None], endpoint: str) -> AsyncIterator[bytes]:
        """`stream`, then [DONE]; a failure mid-stream (or at shutdown) is an error event, then [DONE].
        Leaving early (client gone) closes the front end's stream, which aborts the request there."""
        status = 499  # until the stream completes: the client went away
        try:
            with self.metrics.in_flight():
                async for event in stream:
                    yield event
            status = 200
            yield sse("[DONE]")
        except Exception as exc:
            err = _failure(exc)
            status = err.status
            yield sse(err.body())
            yield sse("[DONE]")
        finally:
            await events.aclose()
            self.metrics.finished(endpoint, status, out.result if status == 200 else None, out)

    async def native_generate(self, request: Request) -> Response:
        start = time.perf_counter()
        self.authorize(request)
        body = validate(GenerateRequest, await self.read_json(request))
        if (body.input_ids is None) == (body.text is None):
            raise ApiError(400, "give exactly one of 'input_ids' and 'text'", param="input_ids")
        ids = self.check_prompt(body.input_ids, "input_ids") if body.input_ids is not None else \
            await self.encode_text(body.text or "", "text")
        sp = body.sampling_params
        stop_ids = [] if sp.stop_token_ids is None and sp.ignore_eos else sp.stop_token_ids
        req = self.request(ids, sp.max_new_tokens, sp.temperature, sp.top_p, sp.top_k,
                           sp.sampling_seed if sp.sampling_seed is not None else body.seed, stop_ids,
                           sp.min_new_tokens)
        if body.seed is not None:
            req.seed = body.seed
        req.return_logits, req.return_hidden = body.return_logits, body.return_hidden_states
        rid = new_id("gen")
        out = Output(req, self.text, self.stops(sp.stop), start=start)
        if body.stream:
            chain, events = await self.submit(request, req)
            return _sse_response(self.guarded(self.native_stream(out, chain, rid), out, events, request.url.path))
        text = await self.collect(request, out)
        result = out.result
        assert result is not None
        meta = native_meta(rid, result, time.perf_counter() - out.start)
        if body.return_logits:
            meta["logits"] = result.extra.get("logits")
        if body.return_hidden_states:
            meta["hidden_states"] = result.extra.get("hidden")
        self.metrics.finished(request.url.path, 200, result, out)
        return JSONResponse({"text": text, "output_ids": list(result.output_ids), "meta_info": meta})

    async def native_stream(self, out: Output, chain: AsyncIterator[FrontEndEvent], rid: str
                            ) -> AsyncIterator[bytes]:
        """SGLang's stream: one event per committed-token event with the CUMULATIVE text and output ids and
        `meta_info` (completion_tokens so far, finish_reason null until the last event)."""
        text, ids = "", []
        async for piece in out.pieces(chain):
            text += piece.text
            ids += piece.token_ids
            if piece.token_ids:
                meta = native_meta(rid, None, time.perf_counter() - out.start, len(out.req.prompt_ids), len(ids))
                yield sse({"text": text, "output_ids": ids, "meta_info": meta})
        result = out.result
        if result is None or result.finish_reason == "error":
            raise _generation_error(result)
        meta = native_meta(rid, result, time.perf_counter() - out.start)
        yield sse({"text": text, "output_ids": ids, "meta_info": meta})

    # ---- text utilities -----------------------------------------------------------------------------------
    async def tokenize(self, request: Request) -> dict[str, Any]:
        self.authorize(request)
        body = validate(TokenizeRequest, await self.read_json(request))
        self.check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise ApiError(400, "give exactly one of 'prompt' and 'messages'", param="prompt")
        self.need_tokenizer("/tokenize")
        if body.messages is not None:
            if body.add_special_tokens:
                raise ApiError(400, "'add_special_tokens' must be false with 'messages' (the chat template adds "
                                    "them)", param="add_special_tokens")
            ids = await self.chat_ids(body.messages, body.chat_template_kwargs, body.add_generation_prompt)
        else:
            ids = await self.text.encode(body.prompt or "", add_special_tokens=body.add_special_tokens is not False)
        strs = self.text.tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
        return {"count": len(ids), "max_model_len": self.opts.context_length, "tokens": ids, "token_strs": strs}

    async def detokenize(self, request: Request) -> dict[str, Any]:
        self.authorize(request)
        body = validate(DetokenizeRequest, await self.read_json(request))
        self.check_model(body.model)
        self.need_tokenizer("/detokenize")
        vocab = len(self.text.tokenizer)
        bad = [t for t in body.tokens if t >= vocab]
        if bad:
            raise ApiError(400, f"'tokens': token id(s) {bad[:5]} outside the vocabulary [0, {vocab})", param="tokens")
        return {"prompt": await self.text.decode(body.tokens)}

    def authorize(self, request: Request) -> None:
        """With `server.api_key`, a request needs `Authorization: Bearer <key>` (compared in constant time)."""
        key = self.opts.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {key}".encode()):
            raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>' (server.api_key)",
                           "authentication_error")

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{
                "id": self.opts.model_name,
                "object": "model",
                "created": 0,
                "owned_by": "tokenrouter",
                "members": list(self.frontend.model_names),
                "eos_token_ids": list(self.frontend.eos_token_ids),
            }],
        }


async def until_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, or 499 if the client disconnects first; then `work` is cancelled, which aborts the
    request in the front end (a non-streaming client that leaves must not keep its request running)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        raise ApiError(499, "the client closed the connection", "client_closed")
    return task.result()


async def _client_gone(request: Request) -> None:
    """Returns once the client has disconnected: after the body, the server's receive() waits for that."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _chain(first: FrontEndEvent, rest: AsyncIterator[FrontEndEvent]) -> AsyncIterator[FrontEndEvent]:
    yield first
    if first.result is None:
        async for item in rest:
            yield item


def _failure(exc: BaseException) -> ApiError:
    """A request the runtime rejected (UserError: e.g. it can never fit) is the client's fault (400); one the
    routing algorithm failed is the server's (500), and so is a failed or closed runtime (503)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, AlgorithmFailure):
        return ApiError(500, _public(str(exc)), "server_error")
    if isinstance(exc, UserError):
        return ApiError(400, str(exc))
    return ApiError(503, _public(f"generation failed: {exc}"), "server_error")


def _generation_error(result: GenerationResult | None) -> ApiError:
    """A result that reports its own failure (systems that return errors instead of raising), or none."""
    if result is None:
        return ApiError(503, "the stream ended without a result", "server_error")
    return ApiError(500, _public(result.error or "generation failed"), "server_error")


_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s/'\"]+/)+")


def _public(message: str) -> str:
    """A server-side failure as a client sees it: its first line, each absolute path cut to its last part (the
    whole text, and any traceback, is in the server's log)."""
    lines = message.strip().splitlines()
    return _ABSOLUTE_PATH.sub(".../", lines[0] if lines else "")


def _sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def create_app(frontend: FrontEnd, tokenizer: Any, options: ServerOptions, manage_frontend: bool = True
               ) -> FastAPI:
    """The FastAPI app over `frontend` (every member of FrontEnd is used; see frontend_api.py). With
    `manage_frontend`, the app's lifespan starts the front end (its subservers) before serving and closes it on
    shutdown, so uvicorn's signal handling shuts everything down."""
    server = HttpServer(frontend, tokenizer, options)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_frontend:
            await frontend.start()
        try:
            yield
        finally:
            if manage_frontend:
                await frontend.close()
            server.text.close()

    app = FastAPI(title="TokenRouter", description=DESCRIPTION, lifespan=lifespan, docs_url="/docs",
                  redoc_url=None, openapi_url="/openapi.json")
    app.state.server = server
    openapi.install(app, REQUEST_MODELS)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        server.metrics.answered(request.url.path, exc.status)
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(ApiError(exc.status_code, str(exc.detail)).body(), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.post("/v1/completions", openapi_extra=openapi.request_body(CompletionRequest),
              responses=openapi.responses("A text completion (an SSE stream with `stream: true`).", True))
    async def _completions(request: Request) -> Response:
        return await server.completions(request, chat=False)

    @app.post("/v1/chat/completions", openapi_extra=openapi.request_body(ChatRequest),
              responses=openapi.responses("A chat completion (an SSE stream with `stream: true`).", True))
    async def _chat(request: Request) -> Response:
        return await server.completions(request, chat=True)

    @app.post("/generate", openapi_extra=openapi.request_body(GenerateRequest),
              responses=openapi.responses("Output token ids and text, with `meta_info`."))
    async def _generate(request: Request) -> Response:
        return await server.native_generate(request)

    @app.post("/tokenize", openapi_extra=openapi.request_body(TokenizeRequest),
              responses=openapi.responses("`count`, `max_model_len`, `tokens` (and `token_strs`), as vLLM."))
    async def _tokenize(request: Request) -> dict[str, Any]:
        return await server.tokenize(request)

    @app.post("/detokenize", openapi_extra=openapi.request_body(DetokenizeRequest),
              responses=openapi.responses("`prompt`: the decoded text, as vLLM."))
    async def _detokenize(request: Request) -> dict[str, Any]:
        return await server.detokenize(request)

    @app.get("/v1/models")
    async def _models(request: Request) -> dict[str, Any]:
        server.authorize(request)
        return server.models()

    @app.get("/version")
    async def _version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/health")
    async def _health() -> JSONResponse:
        # 503 `unhealthy` when the runtime cannot serve; 200 `degraded` while it serves but the routing algorithm
        # failed requests lately (it still serves the others: a balancer should keep it), naming the counts
        problem = frontend.health_problem()
        models = list(frontend.model_names)
        if problem is not None:  # load balancers and scripts take the status code, not the body
            return JSONResponse({"status": "unhealthy", "error": _public(problem), "models": models}, status_code=503)
        trouble = frontend.algorithm_trouble()
        if trouble is not None:
            trouble = {**trouble, "last_error": _public(trouble["last_error"])}
            return JSONResponse({"status": "degraded", "models": models, "algorithm": trouble})
        return JSONResponse({"status": "ok", "models": models})

    @app.get("/metrics")
    async def _metrics() -> Response:
        stats = await frontend.refresh_stats(timeout_s=1.0)  # current counters, not the last piggy-backed ones
        return Response(server.metrics.render(stats), media_type=CONTENT_TYPE_LATEST)

    return app

