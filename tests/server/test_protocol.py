"""SSE framing: what every streamed token goes through."""

from __future__ import annotations

import json

from tokenrouter.server.protocol import sse


def _payload(event: bytes) -> object:
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    return json.loads(event[len(b"data: "):-2])


def test_sse_events_are_json_lines_in_utf8_and_done_passes_through() -> None:
    chunk = {"id": "cmpl-1", "choices": [{"index": 0, "text": "é 😀 \"q\"\n", "logprobs": None}], "n": 1.5}
    event = sse(chunk)
    assert _payload(event) == chunk and "é".encode() in event  # UTF-8, not \\u escapes
    assert sse("[DONE]") == b"data: [DONE]\n\n"


def test_a_lone_surrogate_is_escaped_not_an_error() -> None:
    assert _payload(sse({"text": "a\ud800b"})) == {"text": "a\ud800b"}
