"""Wire formats of the HTTP server: OpenAI completions/chat and SGLang-style `/generate` requests, validated
strictly, and the OpenAI response and stream-chunk shapes.

Why strict: a silently ignored field (say `stop` or `logprobs`) makes a client believe it got something it
did not. Every field is either implemented, accepted only at its no-op value, or rejected with a 400 that
names it.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokenrouter.results import GenerationResult

M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """An error answered as OpenAI-style JSON: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, err_type: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.status}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Strict):
    include_usage: bool = False


class OpenAISampling(_Strict):
    """Fields shared by both OpenAI endpoints (plus the vLLM/SGLang extensions top_k, stop_token_ids,
    return_token_ids)."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)  # 0 or -1: off
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop_token_ids: list[int] | None = None
    return_token_ids: bool = False  # add each choice's / chunk's token ids (needed without a tokenizer)
    user: str | None = None  # metadata only, as in OpenAI


class CompletionRequest(OpenAISampling):
    prompt: str | list[int] | list[str] | list[list[int]]


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatRequest(OpenAISampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class GenerateSampling(_Strict):
    """SGLang's `sampling_params` names (subset)."""

    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    sampling_seed: int | None = None
    stop_token_ids: list[int] | None = None


class GenerateRequest(_Strict):
    """SGLang-style native request: one prompt as ids (or text), no streaming. `return_logits` /
    `return_hidden_states` return the LAST step's next-token logits / last hidden state, which is what a
    routing decision needs; `seed` is the routing/sampling seed of the request."""

    input_ids: list[int] | None = None
    text: str | None = None
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    return_logits: bool = False
    return_hidden_states: bool = False
    seed: int | None = None


# OpenAI fields we do not implement, accepted only at the value that means "feature off".
_NOOP_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (1, None),
    "best_of": (1, None),
    "echo": (False, None),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logit_bias": (None,),
    "stop": (None, [], ""),
    "suffix": (None, ""),
    "tools": (None, []),
    "tool_choice": (None, "none"),
}


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(data).__name__}")
    return data


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON type (so `true` is not taken for `1`)."""
    numbers = {int, float}
    return (type(a) is type(b) or {type(a), type(b)} <= numbers) and a == b


def validate(cls: type[M], data: dict[str, Any]) -> M:
    """Build `cls` from a JSON object, or raise a 400 naming the first bad or unsupported field."""
    data = dict(data)
    for name, noop in _NOOP_VALUES.items():
        if name in data and name not in cls.model_fields:
            value = data.pop(name)
            if not any(_same(value, v) for v in noop):
                raise ApiError(400, f"unsupported field {name!r}: only {noop[0]!r} is supported", param=name)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ApiError(400, f"unsupported field {where!r}", param=where) from None
        if err["type"] == "missing":
            raise ApiError(400, f"missing required field {where!r}", param=where) from None
        raise ApiError(400, f"invalid field {where!r}: {err['msg']}", param=where) from None


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(result: GenerationResult) -> dict[str, Any]:
    """OpenAI usage, plus which model produced how many tokens and the hand-off count (TokenRouter's own)."""
    prompt, completion = len(result.prompt_ids), len(result.output_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "tokens_per_model": dict(result.tokens_per_model),
        "handoffs": result.handoffs,
    }


def _envelope(rid: str, model: str, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": choices, **extra}


def response_body(rid: str, model: str, chat: bool, text: str, result: GenerationResult,
                  token_ids: bool) -> dict[str, Any]:
    """A whole (non-streamed) completion or chat completion."""
    choice: dict[str, Any] = {"index": 0}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    choice.update(logprobs=None, finish_reason=result.finish_reason)
    if token_ids:
        choice["token_ids"] = list(result.output_ids)
    return _envelope(rid, model, "chat.completion" if chat else "text_completion", [choice], usage=usage(result))


def stream_chunk(
    rid: str,
    model: str,
    chat: bool,
    text: str | None,
    token_ids: list[int] | None,
    finish_reason: str | None = None,
    role: bool = False,
) -> dict[str, Any]:
    """One SSE chunk: a text delta (or the opening role delta of a chat stream, or the closing finish)."""
    if chat:
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return _envelope(rid, model, "chat.completion.chunk" if chat else "text_completion", [choice])


def usage_chunk(rid: str, model: str, chat: bool, result: GenerationResult) -> dict[str, Any]:
    """The last chunk of a stream with `stream_options.include_usage` (no choices, as OpenAI sends it)."""
    return _envelope(rid, model, "chat.completion.chunk" if chat else "text_completion", [], usage=usage(result))


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
