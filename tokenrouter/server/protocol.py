"""Wire formats of the HTTP server: OpenAI completions/chat and SGLang-style `/generate` requests, validated
strictly, and the OpenAI response and stream-chunk shapes.

Why strict: a silently ignored field (say `stop` or `logprobs`) makes a client believe it got something it
did not. Every field is either implemented, accepted only at its no-op value, or rejected with a 400 that
names it. Types are strict too (`"2"`, `true` or `2.0` is no integer; an integer is a float), numbers are
finite and integers bounded, so nothing a client sends can fail later in msgpack or the sampler.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokenrouter.generation import GenerationResult
from tokenrouter.runtime.messages import INT64_MAX, INT64_MIN, TOKEN_ID_LIMIT
from tokenrouter.server.stop import MAX_STOP_STRINGS

M = TypeVar("M", bound=BaseModel)

MAX_TOKENS_LIMIT = 2**31 - 1

TokenId = Annotated[int, Field(ge=0, lt=TOKEN_ID_LIMIT)]
Seed = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
TopK = Annotated[int, Field(ge=-1, lt=TOKEN_ID_LIMIT)]  # 0 or -1: off
StopString = Annotated[str, Field(min_length=1)]
Stop = StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)]
# chat_template_kwargs may not override what the server passes apply_chat_template itself
RESERVED_TEMPLATE_KWARGS = frozenset({"conversation", "tokenize", "return_dict", "return_tensors",
                                      "add_generation_prompt", "tools", "documents", "chat_template",
                                      "continue_final_message", "return_assistant_tokens_mask", "tokenizer_kwargs",
                                      "padding", "truncation", "max_length"})


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: int


class ErrorResponse(BaseModel):
    """The body of every error answer (OpenAI's shape)."""

    error: ErrorDetail


class ApiError(Exception):
    """An error answered as OpenAI-style JSON: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, err_type: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        detail = ErrorDetail(message=self.message, type=self.err_type, param=self.param, code=self.status)
        return ErrorResponse(error=detail).model_dump()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    # fields we do not implement, accepted only at the values that mean "feature off" (the first is named)
    noop_values: ClassVar[dict[str, tuple[Any, ...]]] = {}


class StreamOptions(_Strict):
    include_usage: bool = False  # a last chunk with the request's usage
    continuous_usage_stats: bool = False  # usage so far in every chunk (vLLM), so clients can count tokens


# OpenAI (and vLLM/SGLang extension) fields we do not implement.
_OPENAI_NOOP_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (1, None),
    "best_of": (1, None),
    "echo": (False, None),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "repetition_penalty": (1, 1.0, None),
    "logit_bias": (None,),
    "suffix": (None, ""),
    "tools": (None, []),
    "tool_choice": (None, "none"),
}


class OpenAISampling(_Strict):
    """Fields shared by both OpenAI endpoints (plus the vLLM/SGLang extensions top_k, stop_token_ids,
    ignore_eos, return_token_ids). `stop_token_ids` replaces the EOS ids (None: EOS); `ignore_eos` without
    `stop_token_ids` means no stop token at all."""

    noop_values = _OPENAI_NOOP_VALUES

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: TopK = 0
    seed: Seed | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Stop | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0, le=MAX_TOKENS_LIMIT)  # no stop token (or stop string) before this many
    return_token_ids: bool = False  # add each choice's / chunk's token ids (needed without a tokenizer)
    user: str | None = None  # metadata only, as in OpenAI


class CompletionRequest(OpenAISampling):
    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]


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
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    chat_template_kwargs: dict[str, Any] | None = None  # extra chat-template variables, e.g. enable_thinking


class GenerateSampling(_Strict):
    """SGLang's `sampling_params` names (subset)."""

    max_new_tokens: int = Field(128, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: TopK = 0
    sampling_seed: Seed | None = None
    stop: Stop | None = None  # cut from the text, as SGLang does without no_stop_trim
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    min_new_tokens: int = Field(0, ge=0, le=MAX_TOKENS_LIMIT)


class GenerateRequest(_Strict):
    """SGLang-style native request: one prompt as ids (or text); `stream` answers SSE events of the
    cumulative text, as SGLang does. `return_logits` / `return_hidden_states` return the LAST step's
    next-token logits / last hidden state, which is what a routing decision needs; `seed` is the
    routing/sampling seed of the request."""

    noop_values = {"lora_path": (None, ""), "return_logprob": (False, None), "logprob_start_len": (-1, None),
                   "return_routed_experts": (False, None)}

    input_ids: list[TokenId] | None = None
    text: str | None = None
    sampling_params: GenerateSampling = Field(default_factory=GenerateSampling)
    return_logits: bool = False
    return_hidden_states: bool = False
    seed: Seed | None = None
    stream: bool = False


class TokenizeRequest(_Strict):
    """vLLM's `/tokenize`: a text `prompt`, or chat `messages` through the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    add_special_tokens: bool | None = None  # None: True for a prompt, False for messages (as vLLM)
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(_Strict):
    """vLLM's `/detokenize`."""

    model: str | None = None
    tokens: list[TokenId]


REQUEST_MODELS: tuple[type[BaseModel], ...] = (CompletionRequest, ChatRequest, GenerateRequest, TokenizeRequest,
                                               DetokenizeRequest)
# Every field name a request may hold: what tells the path of a bad value from pydantic's union-branch
# labels (`str`, `list[int]`, ...) in an error location.
_FIELD_NAMES = frozenset(name for cls in (*REQUEST_MODELS, StreamOptions, ChatMessage, TextPart, GenerateSampling)
                         for name in cls.model_fields)


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 for anything Python's json would choke on or let through: invalid
    UTF-8 or JSON, NaN/Infinity, nesting past the recursion limit, integers over 4,300 digits, and strings
    with a lone UTF-16 surrogate (`"\\ud800"`: no tokenizer or JSON encoder takes it)."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise ApiError(400, "request body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the int digit limit, NaN/Infinity
        reason = str(exc).split(";")[0]  # the digit limit's advice to call sys.set_int_max_str_digits: not ours
        raise ApiError(400, f"request body is not valid JSON: {reason}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(data).__name__}")
    if b"\\u" in raw:  # a surrogate can only come from an escape
        _check_unicode(data)
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_unicode(data: Any) -> None:
    """400 naming the first string (or key) that is not valid Unicode. Iterative: depth is not bounded here.
    Keys are checked before they become part of a path, so no message or `param` carries a surrogate."""
    todo: list[tuple[str, Any]] = [("", data)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, where)
                todo.append((f"{where}.{key}" if where else key, item))
        elif isinstance(value, list):
            todo.extend((f"{where}.{i}", item) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, where)


def _check_text(text: str, where: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("unicode_escape").decode()
        place = f"field {where!r}" if where else "the request body"
        raise ApiError(400, f"lone UTF-16 surrogate {bad!r} in {place}", param=where or None) from None


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON type (so `true` is not taken for `1`)."""
    numbers = {int, float}
    return (type(a) is type(b) or {type(a), type(b)} <= numbers) and a == b


def validate(cls: type[M], data: dict[str, Any]) -> M:
    """Build `cls` from a JSON object, or raise a 400 naming the first bad or unsupported field."""
    data = dict(data)
    noop_values: dict[str, tuple[Any, ...]] = getattr(cls, "noop_values", {})
    for name, noop in noop_values.items():
        if name in data:
            value = data.pop(name)
            if not any(_same(value, v) for v in noop):
                raise ApiError(400, f"unsupported field {name!r}: only {noop[0]!r} is supported", param=name)
    try:
        model = cls.model_validate(data)
    except ValidationError as exc:
        err = _most_specific(exc.errors())
        where = _path(err)
        if err["type"] == "extra_forbidden":
            raise ApiError(400, f"unsupported field {where!r}", param=where) from None
        if err["type"] == "missing":
            raise ApiError(400, f"missing required field {where!r}", param=where) from None
        raise ApiError(400, f"invalid field {where!r}: {err['msg']}", param=where) from None
    reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(getattr(model, "chat_template_kwargs", None) or {}))
    if reserved:
        raise ApiError(400, f"'chat_template_kwargs' may not set {reserved[0]!r}", param="chat_template_kwargs")
    return model


def _path(err: Any) -> str:
    """The dotted path of the bad value: field names and list indexes, without pydantic's union-branch labels
    (`str`, `list[int]`, ...). An unknown key (extra_forbidden, the last item) is the client's own: kept."""
    loc = err["loc"]
    unknown = len(loc) - 1 if err["type"] == "extra_forbidden" else -1
    return ".".join(str(p) for i, p in enumerate(loc) if isinstance(p, int) or p in _FIELD_NAMES or i == unknown)


def _most_specific(errors: list[Any]) -> Any:
    """Of the first bad field's errors, the one deepest into the value: for a union (a prompt is text, ids,
    texts or id lists) pydantic reports every branch, and the deepest is the branch the client meant."""
    first = [e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]]
    return max(first, key=lambda e: len(e["loc"]))


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


def running_usage(prompt: int, completion: int) -> dict[str, int]:
    """The usage so far, for `stream_options.continuous_usage_stats` (in every chunk, as vLLM)."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def native_meta(rid: str, result: GenerationResult | None, e2e_s: float, prompt: int = 0,
                completion: int = 0) -> dict[str, Any]:
    """`/generate`'s meta_info: of a finished request, or (result None) of one still streaming."""
    if result is None:
        return {"id": rid, "prompt_tokens": prompt, "completion_tokens": completion, "finish_reason": None,
                "e2e_latency": e2e_s}
    return {
        "id": rid,
        "prompt_tokens": len(result.prompt_ids),
        "completion_tokens": len(result.output_ids),
        "finish_reason": {"type": result.finish_reason},
        "e2e_latency": e2e_s,
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
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One SSE chunk: a text delta (or the opening role delta of a chat stream, or the closing finish),
    with the usage so far if given."""
    if chat:
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    extra = {} if usage is None else {"usage": usage}
    return _envelope(rid, model, "chat.completion.chunk" if chat else "text_completion", [choice], **extra)


def usage_chunk(rid: str, model: str, chat: bool, result: GenerationResult) -> dict[str, Any]:
    """The last chunk of a stream with `stream_options.include_usage` (no choices, as OpenAI sends it)."""
    return _envelope(rid, model, "chat.completion.chunk" if chat else "text_completion", [], usage=usage(result))


_JSON = msgspec.json.Encoder()


def sse(data: dict[str, Any] | str) -> bytes:
    """One SSE event. msgspec encodes a chunk in 0.7 us against json.dumps's 8.7 (one per streamed token); a lone
    surrogate, which UTF-8 cannot hold, falls back to json's escapes."""
    if isinstance(data, str):
        return f"data: {data}\n\n".encode()
    try:
        payload = _JSON.encode(data)
    except UnicodeEncodeError:
        payload = json.dumps(data, separators=(",", ":")).encode()
    return b"data: " + payload + b"\n\n"
