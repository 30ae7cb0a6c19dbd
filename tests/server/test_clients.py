"""The payloads real clients send (issue #14), against `tokenrouter serve` as a real subprocess over real HTTP:
the request bodies of SGLang's bench_serving (sglang-oai, sglang) and `vllm bench serve` (openai,
openai-chat), copied as fixtures from their sources; the official `openai` client; stop strings, ignore_eos,
continuous usage, chat template kwargs, /tokenize, /detokenize, /version, the API key and /metrics."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import pytest

from ..runtime.http_helpers import SIM, Server, sse_events, start_server, stop_cleanly

KEY = "sk-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with pytest.MonkeyPatch.context() as mp:  # the key comes from the environment here
        mp.setenv("TOKENROUTER_API_KEY", KEY)
        server = start_server(SIM, tmp_path_factory.mktemp("sim"))
    yield server
    stop_cleanly(server, signal.SIGTERM)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(["models=tiny-random", "runtime.thresholds=[1,1]", "algorithm.route_prob=0.3"],
                          tmp_path_factory.mktemp("tiny"))
    yield server
    stop_cleanly(server, signal.SIGINT)


def _chunks(url: str, path: str, body: dict, headers: dict | None = None) -> list[dict]:
    with httpx.stream("POST", f"{url}{path}", json=body, headers=headers, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        events = sse_events(resp)
    assert events[-1] == "[DONE]"
    assert not any("error" in e for e in events[:-1] if isinstance(e, dict)), events
    return [e for e in events[:-1] if isinstance(e, dict)]


def _reference(url: str, prompt: str, max_tokens: int = 24) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "seed": 7, "return_token_ids": True,
            "ignore_eos": True}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]


# ---- stop strings --------------------------------------------------------------------------------------

def test_stop_string_cuts_the_text_and_ends_the_request(tiny: Server) -> None:
    ref = _reference(tiny.url, "Once upon a time")
    text = ref["text"]
    stop = next(text[k : k + 2] for k in range(len(text) // 3, len(text) - 2) if text[k : k + 2].strip())
    expected = text[: text.index(stop)]
    body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "seed": 7, "ignore_eos": True,
            "return_token_ids": True}
    for stops in (stop, [stop, "\x00never"]):
        full = httpx.post(f"{tiny.url}/v1/completions", json={**body, "stop": stops}, timeout=60).json()
        choice = full["choices"][0]
        assert choice["text"] == expected and choice["finish_reason"] == "stop"
        n = full["usage"]["completion_tokens"]
        assert n == len(choice["token_ids"]) and choice["token_ids"] == ref["token_ids"][:n]
        assert sum(full["usage"]["tokens_per_model"].values()) == n
    chunks = _chunks(tiny.url, "/v1/completions", {**body, "stop": stop, "stream": True,
                                                   "stream_options": {"include_usage": True}})
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == expected
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == n
    # SGLang's native /generate: sampling_params.stop, whole and streamed (cumulative text)
    native = {"text": "Once upon a time", "seed": 7,
              "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True, "stop": [stop]}}
    whole = httpx.post(f"{tiny.url}/generate", json=native, timeout=60).json()
    assert whole["text"] == expected and whole["output_ids"] == ref["token_ids"][:n]
    assert whole["meta_info"]["finish_reason"] == {"type": "stop"}
    streamed = _chunks(tiny.url, "/generate", {**native, "stream": True})
    assert streamed[-1]["text"] == expected and streamed[-1]["meta_info"]["finish_reason"] == {"type": "stop"}


def test_min_tokens_masks_stop_ids_and_defers_stop_strings(tiny: Server) -> None:
    ref = _reference(tiny.url, "Once upon a time")
    ids = ref["token_ids"]
    stops = sorted(set(ids[:3]))  # stop ids that end the request within 3 tokens ...
    body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "seed": 7, "return_token_ids": True,
            "stop_token_ids": stops}
    early = httpx.post(f"{tiny.url}/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert len(early["token_ids"]) <= 3 and early["finish_reason"] == "stop"
    for path, extra in (("/v1/completions", {"min_tokens": 10}),  # ... but not before 10 are out
                        ("/generate", None)):
        if extra is None:
            native = {"text": "Once upon a time", "seed": 7, "sampling_params": {
                "max_new_tokens": 24, "temperature": 0, "stop_token_ids": stops, "min_new_tokens": 10}}
            out = httpx.post(f"{tiny.url}{path}", json=native, timeout=60).json()
            got, reason = out["output_ids"], out["meta_info"]["finish_reason"]["type"]
        else:
            choice = httpx.post(f"{tiny.url}{path}", json={**body, **extra}, timeout=60).json()["choices"][0]
            got, reason = choice["token_ids"], choice["finish_reason"]
        assert not set(got[:10]) & set(stops) and len(got) > 10, path
        assert (reason == "stop" and got[-1] in stops) or (reason == "length" and len(got) == 24), path
    # a stop string is matched only once min_tokens are out: an earlier occurrence does not count
    text = ref["text"]
    stop = text[:2]
    head = httpx.post(f"{tiny.url}/detokenize", json={"tokens": ids[:6]}).json()["prompt"]
    later = text.find(stop, len(head))
    cut = httpx.post(f"{tiny.url}/v1/completions", json={**body, "stop_token_ids": None, "ignore_eos": True,
                                                         "stop": stop, "min_tokens": 6}, timeout=60).json()
    assert cut["choices"][0]["text"] == (text[:later] if later >= 0 else text)


def test_stop_string_in_chat_and_without_tokenizer(tiny: Server, sim: Server) -> None:
    messages = [{"role": "user", "content": "Tell me a story."}]
    body = {"messages": messages, "max_tokens": 20, "temperature": 0, "seed": 3, "ignore_eos": True}
    ref = httpx.post(f"{tiny.url}/v1/chat/completions", json=body, timeout=60).json()["choices"][0]["message"]
    stop = ref["content"][len(ref["content"]) // 2 :][:2]
    cut = httpx.post(f"{tiny.url}/v1/chat/completions", json={**body, "stop": [stop]}, timeout=60).json()
    assert cut["choices"][0]["message"]["content"] == ref["content"][: ref["content"].index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    resp = httpx.post(f"{sim.url}/v1/completions", json={"prompt": [1, 2], "stop": "x"}, headers=AUTH)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "stop"


@pytest.mark.parametrize(("body", "param"), [
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": [""]}, "stop.0"),
    ({"n": 2}, "n"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"frequency_penalty": -1}, "frequency_penalty"),
    ({"repetition_penalty": 1.1}, "repetition_penalty"),
    ({"min_tokens": -1}, "min_tokens"),
])
def test_unimplemented_values_get_400_naming_the_field(sim: Server, body: dict, param: str) -> None:
    resp = httpx.post(f"{sim.url}/v1/completions", json={"prompt": [1, 2], **body}, headers=AUTH)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text


def test_chat_template_kwargs_reach_the_template(tiny: Server) -> None:
    from tokenrouter.engine.loader import load_tokenizer

    tok = load_tokenizer("tiny-random:small")
    messages = [{"role": "user", "content": "2+2?"}]
    body = {"messages": messages, "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": False}}
    resp = httpx.post(f"{tiny.url}/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False,
                                  enable_thinking=False)
    assert resp.json()["usage"]["prompt_tokens"] == len(ids)
    bad = httpx.post(f"{tiny.url}/v1/chat/completions", json={**body, "chat_template_kwargs": {"tokenize": False}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "chat_template_kwargs"


# ---- token counting in streams ---------------------------------------------------------------------------

def test_continuous_usage_counts_every_chunks_tokens(sim: Server) -> None:
    body = {"prompt": [5, 6, 7], "max_tokens": 30, "seed": 4, "stream": True, "return_token_ids": True,
            "ignore_eos": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chunks = _chunks(sim.url, "/v1/completions", body, AUTH)
    seen = 0
    for c in chunks[:-1]:
        seen += len(c["choices"][0]["token_ids"])
        assert c["usage"]["completion_tokens"] == seen and c["usage"]["prompt_tokens"] == 3
    assert seen == 30 and chunks[-1]["usage"]["completion_tokens"] == 30


# ---- the bodies real benchmark clients send -------------------------------------------------------------

PROMPT = "The capital of France is"


def test_vllm_bench_serve_openai_body(tiny: Server) -> None:
    """vllm/benchmarks/lib/endpoint_request_func.py, async_request_openai_completions (+ --ignore-eos)."""
    body = {"model": "tiny-random", "prompt": PROMPT, "repetition_penalty": 1.0, "max_tokens": 12,
            "logprobs": None, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    chunks = _chunks(tiny.url, "/v1/completions", body)
    text = "".join(c["choices"][0].get("text") or "" for c in chunks if c.get("choices"))
    usage = next(c["usage"] for c in chunks if not c.get("choices"))
    assert usage["completion_tokens"] == 12 and text


def test_vllm_bench_serve_openai_chat_body(tiny: Server) -> None:
    """async_request_openai_chat_completions: content as a list of text parts, max_completion_tokens."""
    body = {"model": "tiny-random", "messages": [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}],
            "max_completion_tokens": 10, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": True}
    chunks = _chunks(tiny.url, "/v1/chat/completions", body)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text and next(c["usage"] for c in chunks if not c.get("choices"))["completion_tokens"] == 10


def test_sglang_bench_serving_oai_body(tiny: Server) -> None:
    """sglang bench_serving.py, async_request_openai_completions (backend sglang-oai): it reads
    `choices[0]` of every chunk, so no chunk may have empty choices without stream_options."""
    body = {"model": "tiny-random", "prompt": PROMPT, "temperature": 0.0, "best_of": 1, "max_tokens": 16,
            "stream": True, "ignore_eos": True}
    chunks = _chunks(tiny.url, "/v1/completions", body)
    assert all(c["choices"] for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) and chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_sglang_bench_serving_native_body(tiny: Server) -> None:
    """async_request_sglang_generate (backend sglang, as of sglang 0.5.23): `/generate` streaming cumulative
    text, counting tokens from meta_info.completion_tokens."""
    body = {"text": PROMPT, "sampling_params": {"temperature": 0.0, "max_new_tokens": 14, "ignore_eos": True},
            "stream": True, "lora_path": None, "return_logprob": False, "return_routed_experts": False,
            "logprob_start_len": -1}
    chunks = _chunks(tiny.url, "/generate", body)
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 14
    assert all(b["text"].startswith(a["text"]) for a, b in zip(chunks, chunks[1:], strict=False))
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length"}
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    whole = httpx.post(f"{tiny.url}/generate", json={**body, "stream": False}, timeout=60).json()
    assert whole["meta_info"]["completion_tokens"] == len(whole["output_ids"]) == 14  # no seed: other routing


# ---- the official openai client -------------------------------------------------------------------------

def test_openai_client_stop_stream_usage_and_seed(tiny: Server) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{tiny.url}/v1", api_key="unused", max_retries=0)
    a = client.completions.create(model="tiny-random", prompt=PROMPT, max_tokens=12, seed=11, temperature=1.0)
    b = client.completions.create(model="tiny-random", prompt=PROMPT, max_tokens=12, seed=11, temperature=1.0)
    assert a.choices[0].text == b.choices[0].text  # same seed, same sample
    text = a.choices[0].text
    if len(text) > 4:
        stop = text[2:4]
        cut = client.completions.create(model="tiny-random", prompt=PROMPT, max_tokens=12, seed=11,
                                        temperature=1.0, stop=[stop])
        assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(model="tiny-random", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=8, stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    events = list(stream)
    assert events[-1].usage is not None and events[-1].usage.completion_tokens == 8


# ---- text utilities, version, API key, metrics --------------------------------------------------------

def test_tokenize_detokenize_and_version(tiny: Server) -> None:
    from tokenrouter.engine.loader import load_tokenizer

    tok = load_tokenizer("tiny-random:small")
    out = httpx.post(f"{tiny.url}/tokenize", json={"prompt": PROMPT, "return_token_strs": True}).json()
    assert out["tokens"] == tok.encode(PROMPT) and out["count"] == len(out["tokens"])
    assert out["token_strs"] == tok.convert_ids_to_tokens(out["tokens"]) and out["max_model_len"] > 0
    chat = httpx.post(f"{tiny.url}/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["tokens"] == tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                                     add_generation_prompt=True, tokenize=True, return_dict=False)
    back = httpx.post(f"{tiny.url}/detokenize", json={"tokens": out["tokens"]}).json()
    assert back["prompt"] == tok.decode(out["tokens"], skip_special_tokens=True)
    bad = httpx.post(f"{tiny.url}/detokenize", json={"tokens": [10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert httpx.get(f"{tiny.url}/version").json()["version"]


def test_api_key_guards_the_api_but_not_health_or_metrics(sim: Server) -> None:
    body = {"prompt": [1, 2], "max_tokens": 2}
    for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        resp = httpx.post(f"{sim.url}/v1/completions", json=body, headers=headers)
        assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{sim.url}/v1/models").status_code == 401
    assert httpx.post(f"{sim.url}/generate", json={"input_ids": [1]}).status_code == 401
    assert httpx.post(f"{sim.url}/v1/completions", json=body, headers=AUTH).status_code == 200
    assert httpx.get(f"{sim.url}/v1/models", headers=AUTH).status_code == 200
    assert httpx.get(f"{sim.url}/health").status_code == 200 and httpx.get(f"{sim.url}/metrics").status_code == 200


def test_metrics_parse_with_vllm_style_names_and_types(sim: Server) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    body = {"prompt": [3, 4], "max_tokens": 6, "seed": 1, "stream": True}
    _chunks(sim.url, "/v1/completions", body, AUTH)
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{sim.url}/metrics").text)}
    expected = {
        "tokenrouter:prompt_tokens": "counter", "tokenrouter:generation_tokens": "counter",
        "tokenrouter:request_success": "counter", "tokenrouter:time_to_first_token_seconds": "histogram",
        "tokenrouter:time_per_output_token_seconds": "histogram",
        "tokenrouter:inter_token_latency_seconds": "histogram",
        "tokenrouter:e2e_request_latency_seconds": "histogram", "tokenrouter:request_queue_time_seconds": "histogram",
        "tokenrouter:num_requests_running": "gauge", "tokenrouter:num_requests_waiting": "gauge",
        "tokenrouter:kv_cache_usage_perc": "gauge", "tokenrouter_model_tokens": "counter",
        "tokenrouter_http_requests": "counter", "tokenrouter_model_route_counts": "gauge",
    }
    assert {name: families[name].type for name in expected} == expected
    success = [s for s in families["tokenrouter:request_success"].samples if s.name.endswith("_total")]
    assert success and all(s.labels["model_name"] == "sim-r2r" and s.labels["finished_reason"] for s in success)
    generated = next(s.value for s in families["tokenrouter:generation_tokens"].samples if s.name.endswith("_total"))
    assert generated >= 6
    kv = families["tokenrouter:kv_cache_usage_perc"].samples[0].value
    assert 0.0 <= kv <= 1.0
