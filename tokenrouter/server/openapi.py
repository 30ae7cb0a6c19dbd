"""The server's OpenAPI document (`/openapi.json`, browsable at `/docs`), whose request bodies are the very
pydantic models the handlers validate with, so schema-driven fuzzers and client generators see the truth.

Why by hand: the handlers read their bodies themselves (to cut an oversize body off at 413 while reading, and
to answer every client error as OpenAI-style JSON 400), so FastAPI cannot see the models. Each route names
its model through `openapi_extra`, and the models' JSON schemas join the document's components here.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tokenrouter.server.protocol import ErrorResponse

_REF = "#/components/schemas/{model}"

_ERRORS = {
    400: "Invalid request: malformed JSON, a bad or unsupported field (named in `error.param`), a prompt longer "
         "than the model context, or a request the runtime can never fit.",
    404: "Unknown model (`model` is not the served model set).",
    408: "The request body did not arrive within `server.body_timeout_s`.",
    413: "Request body over `server.max_body_bytes`, or prompt over `server.max_prompt_tokens`.",
    503: "The runtime failed or is shutting down.",
}


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's `openapi_extra`: its JSON request body is `model`."""
    schema = {"$ref": _REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def responses(ok: str, stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """A generation route's documented answers: 200 (JSON, or an SSE stream with `stream: true`) and every
    error status, each an ErrorResponse."""
    content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if stream:
        content["text/event-stream"] = {"schema": {"type": "string"}}
    out: dict[int | str, dict[str, Any]] = {200: {"description": ok, "content": content}}
    out.update({status: {"model": ErrorResponse, "description": text} for status, text in _ERRORS.items()})
    return out


def install(app: FastAPI, models: tuple[type[BaseModel], ...]) -> None:
    """Make `app.openapi()` (what FastAPI serves at `app.openapi_url`) include the schemas of `models`."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            _, defs = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
            doc.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
