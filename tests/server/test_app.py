"""The OpenAI-compatible server end to end: `tokenrouter serve` as a real subprocess (uvicorn on a free
127.0.0.1 port, real subservers), driven over real HTTP. Sim engines where only token ids matter, the
tiny-random torch pair where text, chat templates and tokenizers matter."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from ..runtime.http_helpers import ROOT, SIM, Server, sse_events, start_server, stop_cleanly


@pytest.fixture(scope="module")
def sim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("sim")
    server = start_server([*SIM, "server.max_body_bytes=4096", "server.shutdown_timeout_s=2"], tmp)
    yield server
    if server.proc.poll() is None:  # not stopped by the SIGTERM test (run alone with -k)
        stop_cleanly(server, signal.SIGTERM)


@pytest.fixture(scope="module")
def text_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("text")
    server = start_server(["models=tiny-random", "runtime.thresholds=[1,1]", "algorithm.route_prob=0.3"], tmp)
    yield server
    stop_cleanly(server, signal.SIGINT)


def test_bad_serve_config_is_one_line_and_exit_2() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        cases = {
            "server.port=70000": "server.port must be an integer",
            "server.colour=1": "unknown config key 'server.colour'",
            "algorithm.route_prob=5": "route_prob must be in [0, 1]",
            "server.http=h2": "server.http must be one of httptools, h11, got 'h2'",
            f"server.port={busy.getsockname()[1]}": "cannot listen on 127.0.0.1",
        }
        procs = {arg: subprocess.Popen([sys.executable, "-m", "tokenrouter", "serve", "models=sim-r2r", arg],
                                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for arg in cases}
        for arg, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 2, (arg, err)
            lines = err.strip().splitlines()
            assert lines[-1].startswith("tokenrouter serve: error: ") and cases[arg] in lines[-1], err
            assert "Traceback" not in err


# ---- OpenAI shapes ---------------------------------------------------------------------------------------

def test_completion_stream_and_non_stream_agree_on_tokens_and_usage(sim_server: Server) -> None:
    body = {"model": "sim-r2r", "prompt": [5, 6, 7, 8], "max_tokens": 12, "seed": 3, "temperature": 0,
            "return_token_ids": True}
    full = httpx.post(f"{sim_server.url}/v1/completions", json=body, timeout=30).json()
    assert full["object"] == "text_completion" and full["model"] == "sim-r2r"
    choice = full["choices"][0]
    assert len(choice["token_ids"]) == 12 and choice["finish_reason"] == "length"
    usage = full["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (4, 12, 16)
    assert sum(usage["tokens_per_model"].values()) == 12 and set(usage["tokens_per_model"]) == {"small", "large"}

    with httpx.stream("POST", f"{sim_server.url}/v1/completions", timeout=30,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    streamed = [t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]]
    assert streamed == choice["token_ids"]  # same seed: same routing decisions, same tokens
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finals[-1] == "length" and not any(finals[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12
    assert all(c["id"] == chunks[0]["id"] and c["object"] == "text_completion" for c in chunks)


def test_chat_and_text_completions_on_tiny_models(text_server: Server) -> None:
    from tokenrouter.engine.loader import load_tokenizer

    tok = load_tokenizer("tiny-random:small")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]
    body = {"model": "tiny-random", "messages": messages, "max_tokens": 16, "temperature": 0, "seed": 1}
    resp = httpx.post(f"{text_server.url}/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    full = resp.json()
    assert full["object"] == "chat.completion"
    msg = full["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str) and msg["content"]
    prompt_ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert full["usage"]["prompt_tokens"] == len(prompt_ids)
    assert 1 <= full["usage"]["completion_tokens"] <= 16

    with httpx.stream("POST", f"{text_server.url}/v1/chat/completions", json={**body, "stream": True},
                      timeout=60) as resp:
        events = sse_events(resp)
    chunks = [e for e in events if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == msg["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == full["choices"][0]["finish_reason"]

    comp = {"prompt": "The quick brown fox", "max_tokens": 10, "temperature": 0, "seed": 2, "return_token_ids": True}
    done = httpx.post(f"{text_server.url}/v1/completions", json=comp, timeout=60).json()["choices"][0]
    assert done["text"] == tok.decode(done["token_ids"], skip_special_tokens=True)
    with httpx.stream("POST", f"{text_server.url}/v1/completions", json={**comp, "stream": True}, timeout=60) as r:
        streamed = "".join(e["choices"][0]["text"] for e in sse_events(r) if isinstance(e, dict) and e["choices"])
    assert streamed == done["text"]


def test_native_generate_returns_one_token_with_meta(text_server: Server) -> None:
    body = {"input_ids": [10, 11, 12, 13], "sampling_params": {"max_new_tokens": 1, "temperature": 0}, "seed": 5}
    out = httpx.post(f"{text_server.url}/generate", json=body, timeout=60).json()
    assert len(out["output_ids"]) == 1
    assert out["meta_info"]["prompt_tokens"] == 4 and out["meta_info"]["finish_reason"]["type"] in ("length", "stop")
    again = httpx.post(f"{text_server.url}/generate", json=body, timeout=60).json()
    assert again["output_ids"] == out["output_ids"]
    rich = httpx.post(f"{text_server.url}/generate", timeout=60,
                      json={**body, "return_logits": True, "return_hidden_states": True}).json()
    logits, hidden = rich["meta_info"]["logits"], rich["meta_info"]["hidden_states"]
    assert rich["output_ids"] == out["output_ids"]
    assert max(range(len(logits)), key=logits.__getitem__) == out["output_ids"][0]  # greedy: the argmax
    assert len(hidden) in (64, 128)  # tiny-random small / large hidden size (whichever model finished)
    assert "logits" not in out["meta_info"]
    bad = httpx.post(f"{text_server.url}/generate", json={"input_ids": [1], "text": "a"})
    assert bad.status_code == 400 and "exactly one" in bad.json()["error"]["message"]


def test_models_and_health(sim_server: Server) -> None:
    models = httpx.get(f"{sim_server.url}/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "sim-r2r"
    assert models["data"][0]["members"] == ["small", "large"] and models["data"][0]["eos_token_ids"] == [2]
    assert httpx.get(f"{sim_server.url}/health").json()["status"] == "ok"


# ---- bad requests ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": [1, 2], "logprobs": 2}, "logprobs"),
    ({"prompt": [1, 2], "n": 2}, "n"),
    ({"prompt": [1, 2], "stop": ["\n"]}, "stop"),  # a stop string needs a tokenizer (sim has none)
    ({"prompt": [1, 2], "repetition_penalty": 1.2}, "repetition_penalty"),
    ({"prompt": [1, 2], "min_tokens": -3}, "min_tokens"),
    ({"prompt": [1, 2], "echo": True}, "echo"),
    ({"prompt": [1, 2], "frobnicate": 1}, "frobnicate"),
    ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"),
    ({"prompt": [1, 2], "temperature": "hot"}, "temperature"),
    ({"max_tokens": 3}, "prompt"),
    ({"prompt": [[1, 2], [3]]}, "prompt"),
])
def test_unsupported_or_invalid_fields_get_400(sim_server: Server, body: dict, param: str) -> None:
    resp = httpx.post(f"{sim_server.url}/v1/completions", json=body)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and param in err["message"]


def test_no_op_values_of_unimplemented_fields_are_accepted(sim_server: Server) -> None:
    body = {"prompt": [1, 2], "max_tokens": 2, "n": 1, "logprobs": None, "echo": False, "presence_penalty": 0}
    assert httpx.post(f"{sim_server.url}/v1/completions", json=body).status_code == 200


def test_chat_rejects_bad_messages_and_text_without_tokenizer(sim_server: Server, text_server: Server) -> None:
    bad_role = {"messages": [{"role": "wizard", "content": "hi"}]}
    resp = httpx.post(f"{text_server.url}/v1/chat/completions", json=bad_role)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages.0.role"
    resp = httpx.post(f"{sim_server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert resp.status_code == 400 and "tokenizer" in resp.json()["error"]["message"]


def test_malformed_and_oversize_bodies_get_4xx_json(sim_server: Server) -> None:
    url = f"{sim_server.url}/v1/completions"
    cases = [
        (httpx.post(url, content=b'{"prompt": [1, 2', headers={"content-type": "application/json"}), 400, "JSON"),
        (httpx.post(url, content=b"[1, 2, 3]"), 400, "JSON object"),
        (httpx.post(url, content=b"\xff\xfe"), 400, "JSON"),
        (httpx.post(url, json={"prompt": [1] * 3000}), 413, "limit"),  # > server.max_body_bytes=4096
        (httpx.post(url, content=iter([b'{"prompt": [', b"1, " * 3000, b"1]}"])), 413, "limit"),  # chunked
        (httpx.post(url, json={"prompt": [1, 99999999]}), 400, "vocabulary"),
        (httpx.post(url, json={"prompt": [1, -4]}), 400, "greater than or equal to 0"),
        (httpx.post(url, json={"prompt": [1], "model": "gpt-4"}), 404, "does not exist"),
        (httpx.post(url, json={"prompt": [1], "max_tokens": 10**7}), 400, "KV"),
        (httpx.post(f"{sim_server.url}/v1/nothing", json={}), 404, "Not Found"),
        (httpx.get(url), 405, "Method Not Allowed"),
    ]
    for resp, status, words in cases:
        assert resp.status_code == status, (resp.request.url, resp.text)
        assert resp.headers["content-type"].startswith("application/json")
        assert words in resp.json()["error"]["message"], resp.text
    stream_too_big = httpx.post(url, json={"prompt": [1], "max_tokens": 10**7, "stream": True})
    assert stream_too_big.status_code == 400  # rejected before the event stream starts
    assert httpx.get(f"{sim_server.url}/health").status_code == 200  # the server is fine afterwards


# ---- metrics ---------------------------------------------------------------------------------------------

def test_metrics_count_requests_tokens_and_handoffs(sim_server: Server) -> None:
    for seed in range(3):
        body = {"prompt": [3, 4], "max_tokens": 8, "seed": seed}
        assert httpx.post(f"{sim_server.url}/v1/completions", json=body).status_code == 200
    httpx.post(f"{sim_server.url}/v1/completions", json={"prompt": [1], "bogus": 1})
    text = httpx.get(f"{sim_server.url}/metrics").text
    lines = {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()
                                      if line and not line.startswith("#"))}
    assert int(lines['tokenrouter_http_requests_total{endpoint="/v1/completions",status="200"}']) >= 3
    assert int(lines['tokenrouter_http_requests_total{endpoint="/v1/completions",status="400"}']) >= 1
    per_model = int(lines['tokenrouter_model_tokens_total{model="small"}']) + \
        int(lines['tokenrouter_model_tokens_total{model="large"}'])
    assert per_model == int(lines["tokenrouter_generation_tokens_total"]) >= 24
    assert int(lines["tokenrouter_handoffs_total"]) > 0
    assert int(lines["tokenrouter_request_latency_seconds_count"]) >= 3
    assert int(lines['tokenrouter_request_latency_seconds_bucket{le="+Inf"}']) >= 3
    assert float(lines['tokenrouter_model_steps{model="small"}']) > 0
    assert "# TYPE tokenrouter_request_latency_seconds histogram" in text


# ---- reliability -----------------------------------------------------------------------------------------

def _soak(url: str, clients: int, seconds: float) -> tuple[int, int]:
    """`clients` concurrent streaming clients for `seconds`; every stream must equal the reference output of
    its (prompt, seed) exactly: no token lost, duplicated or reordered. Returns (streams, tokens) checked."""
    variants = [([7 + k, 8, 9 + k], 100 + k) for k in range(8)]
    max_tokens = 24

    async def run() -> tuple[int, int]:
        # idle connections expire on the client before the server's 5 s keep-alive closes them: with both at 5 s
        # a request can go out on a connection the server is closing (a ReadError no server can prevent)
        limits = httpx.Limits(max_connections=clients + 4, keepalive_expiry=2.0)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
            expected = []
            for prompt, seed in variants:
                r = await client.post("/v1/completions", json={"prompt": prompt, "seed": seed,
                                                               "max_tokens": max_tokens, "return_token_ids": True})
                expected.append(r.json()["choices"][0]["token_ids"])
            deadline = time.monotonic() + seconds
            counts = [0, 0]

            async def one_client(c: int) -> None:
                i = 0
                while time.monotonic() < deadline:
                    k = (c * 3 + i) % len(variants)
                    prompt, seed = variants[k]
                    body = {"prompt": prompt, "seed": seed, "max_tokens": max_tokens, "stream": True,
                            "return_token_ids": True, "stream_options": {"include_usage": True}}
                    ids: list[int] = []
                    usage = None
                    async with client.stream("POST", "/v1/completions", json=body) as resp:
                        assert resp.status_code == 200
                        async for line in resp.aiter_lines():
                            if not line.startswith("data: ") or line == "data: [DONE]":
                                continue
                            event = json.loads(line[6:])
                            assert "error" not in event, event
                            if event["choices"]:
                                ids += event["choices"][0]["token_ids"]
                            else:
                                usage = event["usage"]
                    assert ids == expected[k], f"client {c} request {i}: stream differs from reference"
                    assert usage is not None and usage["completion_tokens"] == len(ids)
                    counts[0] += 1
                    counts[1] += len(ids)
                    i += 1

            await asyncio.gather(*(one_client(c) for c in range(clients)))
            return counts[0], counts[1]

    return asyncio.run(run())


def test_64_streaming_clients_short(sim_server: Server) -> None:
    streams, tokens = _soak(sim_server.url, 64, 3.0)
    assert streams >= 64 and tokens == streams * 24


@pytest.mark.slow
def test_64_streaming_clients_30s_lose_and_duplicate_no_token(sim_server: Server) -> None:
    streams, tokens = _soak(sim_server.url, 64, 30.0)
    assert streams >= 640 and tokens == streams * 24


def test_client_leaving_mid_stream_aborts_its_request(sim_server: Server) -> None:
    with httpx.stream("POST", f"{sim_server.url}/v1/completions", timeout=30,
                      json={"prompt": [4, 5], "max_tokens": 20000, "stream": True}) as resp:
        assert next(resp.iter_lines()).startswith("data: ")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = httpx.get(f"{sim_server.url}/metrics").text
        if "tokenrouter_http_requests_running 0.0\n" in text and "tokenrouter_active_requests 0.0\n" in text:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the abandoned request is still running")
    assert 'status="499"' in text  # counted as client-closed


def test_sigterm_mid_stream_exits_cleanly(sim_server: Server) -> None:
    """Last test of the module: it stops the shared sim server (SIGTERM while a stream is open)."""
    try:
        with httpx.stream("POST", f"{sim_server.url}/v1/completions", timeout=30,
                          json={"prompt": [1, 2], "max_tokens": 20000, "stream": True}) as resp:
            assert resp.status_code == 200
            assert next(resp.iter_lines()).startswith("data: ")
            stop_cleanly(sim_server, signal.SIGTERM)
    except httpx.HTTPError:
        pass  # the server cut the stream while shutting down
    assert sim_server.proc.returncode == 0
