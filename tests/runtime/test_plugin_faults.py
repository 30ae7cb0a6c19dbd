"""A misbehaving routing algorithm under a running `tokenrouter serve` (issue #43, items 6-9 and 12): a bug in any
plugin call fails only the requests of that call, with a 500 that blames the algorithm, never the client; the
subserver and every other request go on; a slow route() and an endless hand-off loop are bounded; no response
body carries a traceback or a server path; a SIGKILLed front end leaves no socket directory; a constructor that
raises is one line. The algorithm: tests/runtime/user_algorithms/misbehaving.py (one bug per request seed)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .http_helpers import ROOT, SIM, Server, alive, sse_events, start_server, stop_cleanly
from .user_algorithms import misbehaving as bad

ENV = {"PYTHONPATH": str(Path(__file__).parent)}
ALGORITHM = [*SIM, "algorithm.name=user_algorithms.misbehaving"]
PATH = re.compile(r"(?<![\w.])/(?:[\w.-]+/)+")  # an absolute file path (two or more components)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(ALGORITHM, tmp_path_factory.mktemp("faulty"), env=ENV)
    assert _complete(server.url, 42).status_code == 200  # every model's first route() (untimed) is behind us
    yield server
    stop_cleanly(server, signal.SIGTERM)


def _complete(url: str, seed: int, tokens: int = 24, timeout: float = 30.0, stream: bool = False) -> httpx.Response:
    body = {"prompt": [5, 6, 7, seed % 50], "max_tokens": tokens, "seed": seed, "ignore_eos": True,
            "stream": stream, "return_token_ids": True}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=timeout)


def _algorithm_error(resp: httpx.Response) -> str:
    """The one-line message of a 500 that blames the routing algorithm (and shows no traceback or path)."""
    assert resp.status_code == 500, resp.text
    err = resp.json()["error"]
    assert err["type"] == "server_error" and err["code"] == 500, err
    assert "routing algorithm 'user_algorithms.misbehaving' failed" in err["message"], err
    _clean(resp.text)
    return err["message"]


def _clean(text: str) -> None:
    assert "Traceback" not in text and "\\n" not in text and not PATH.search(text), text


def _metric(url: str, name: str) -> float:
    """One unlabelled sample of /metrics."""
    text = httpx.get(f"{url}/metrics").text
    [value] = [float(line.split()[1]) for line in text.splitlines() if line.split(" ")[0] == name]
    return value


def _concurrently(calls: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}

    def run(key: str, call) -> None:
        try:
            out[key] = call()
        except Exception as exc:  # recorded: the assertions say what went wrong
            out[key] = exc

    threads = [threading.Thread(target=run, args=(k, c)) for k, c in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_a_bug_in_any_plugin_call_fails_only_its_requests_with_a_500(faulty: Server) -> None:
    """Items 6 and 8: a bad destination (a float used to kill the subserver: `routes[dest] += 1`), a raising
    keeps_token() / send() / receive(), a malformed or foreign hand-off message, a failing route() (was 400
    invalid_request_error); innocent requests beside them, streamed and not, finish in full."""
    calls: dict[str, object] = {f"innocent {s}": (lambda s=s: _complete(faulty.url, s)) for s in range(1, 9)}
    calls["innocent stream"] = lambda: _complete(faulty.url, 9, stream=True)
    calls.update({what: (lambda s=s: _complete(faulty.url, s)) for what, s in bad.SEEDS.items()})
    calls["keeps_token raises, streamed"] = lambda: _complete(faulty.url, bad.KEEPS, stream=True)
    calls["send raises midway, streamed"] = lambda: _complete(faulty.url, bad.LATE, stream=True)
    out = _concurrently(calls)
    for key, resp in out.items():
        assert isinstance(resp, httpx.Response), (key, resp)
        if key == "innocent stream":
            events = sse_events(resp)
            assert resp.status_code == 200 and events[-1] == "[DONE]", events[-3:]
            assert sum(len(e["choices"][0]["token_ids"]) for e in events[:-1] if e["choices"]) == 24
        elif key.startswith("innocent"):
            assert resp.status_code == 200, (key, resp.text)
            assert len(resp.json()["choices"][0]["token_ids"]) == 24, key
        elif key == "send raises midway, streamed":  # three tokens, then an error event, then [DONE]
            events = sse_events(resp)
            assert resp.status_code == 200 and events[-1] == "[DONE]", events
            err = events[-2]["error"]
            assert err["code"] == 500 and err["type"] == "server_error" and "send() raised" in err["message"], err
            assert sum(len(e["choices"][0]["token_ids"]) for e in events[:-2] if e["choices"]) == 3
            _clean(resp.text)
        elif key.endswith("streamed"):  # failed before its first token: a plain JSON 500, not an SSE stream
            _algorithm_error(resp)
        else:
            message = _algorithm_error(resp)
            assert {"float destination": "1.5", "destination out of range": "7", "destination count": "destinations",
                    "keeps_token raises": "keeps_token()", "send raises": "send()", "receive raises": "receive()",
                    "malformed message": "send()", "foreign message": "someone-else",
                    "route raises": "FloatingPointError"}[key] in message, (key, message)
    assert faulty.proc.poll() is None, "the server died"
    assert _complete(faulty.url, 42).status_code == 200
    health = httpx.get(f"{faulty.url}/health")
    assert health.status_code == 200, health.text
    body = health.json()
    assert body["status"] == "degraded" and body["algorithm"]["failed_requests"] >= len(bad.SEEDS) + 1, body
    _clean(health.text)
    assert _metric(faulty.url, "tokenrouter_algorithm_failed_requests") == body["algorithm"]["failed_requests"]


def test_a_slow_route_is_cut_at_its_budget_and_reported_by_health(faulty: Server) -> None:
    """Item 7: route() sleeping 5 s used to stall every request on the model while /health said ok; now it fails
    at runtime.route_timeout_s (1 s by default) and /health names the count."""
    t0 = time.monotonic()
    message = _algorithm_error(_complete(faulty.url, bad.SLOW))
    assert time.monotonic() - t0 < 3.0 and "runtime.route_timeout_s" in message, message
    assert _complete(faulty.url, 43).status_code == 200
    body = httpx.get(f"{faulty.url}/health").json()
    assert body["status"] == "degraded" and body["algorithm"]["route_over_budget"] >= 1, body
    assert _metric(faulty.url, "tokenrouter_route_over_budget") == body["algorithm"]["route_over_budget"]


def test_a_request_handed_off_forever_fails_at_the_bound(faulty: Server) -> None:
    """Item 7: a request handed back and forth without a committed token used to run until its client left."""
    t0 = time.monotonic()
    message = _algorithm_error(_complete(faulty.url, bad.LOOP, timeout=20))
    assert "runtime.max_handoffs_per_token" in message and time.monotonic() - t0 < 10, message


def test_a_dead_subserver_answers_one_line_and_logs_the_traceback(tmp_path: Path) -> None:
    """Item 9: an exception no guard catches kills the subserver; the 503 used to carry its traceback with the
    server's absolute paths. Now one line to the client, the traceback on the server's stderr."""
    server = start_server(ALGORITHM, tmp_path, env=ENV)
    try:
        resp = _complete(server.url, bad.DEADLY)
        assert resp.status_code == 503, resp.text
        err = resp.json()["error"]
        assert err["type"] == "server_error" and "Deadly: the router process state is gone" in err["message"], err
        _clean(resp.text)
        assert server.proc.wait(15) == 1
        stderr = server.proc.stderr.read() if server.proc.stderr else ""
        assert "Traceback" in stderr and "raise Deadly" in stderr, stderr  # the log has what the client does not
    finally:
        if server.proc.poll() is None:
            server.stop(signal.SIGKILL)


def test_sigkill_of_the_front_end_leaves_no_socket_directory(tmp_path: Path) -> None:
    """Item 12: the subservers notice their parent is gone and remove its ipc directory. TMPDIR short enough
    for socket paths (a longer one, e.g. pytest-xdist's, makes the runtime use /tmp instead)."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="tr-", dir="/tmp"))
    try:
        _sigkill_leaves_nothing(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _sigkill_leaves_nothing(tmp_path: Path) -> None:
    server = start_server(SIM, tmp_path)
    kids = server.descendants()
    assert list(tmp_path.glob("tokenrouter-*")) and kids
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    deadline = time.monotonic() + 15
    while [p for p in kids if alive(p)]:
        assert time.monotonic() < deadline, "subservers outlived their front end"
        time.sleep(0.05)
    assert not list(tmp_path.glob("tokenrouter-*")), "socket directory left behind"


def test_a_constructor_that_raises_is_one_line(tmp_path: Path) -> None:
    """Item 12: it was a 29-line traceback."""
    server_err = _serve_fails([*ALGORITHM, "+algorithm.fail_init=true"], tmp_path)
    assert server_err == ["tokenrouter serve: error: algorithm 'user_algorithms.misbehaving' failed to build: "
                          "ValueError: cannot read the router weights"], server_err


def _serve_fails(overrides: list[str], tmp: Path) -> list[str]:
    """The non-empty stderr lines of a `tokenrouter serve` that exits 2 (a configuration error)."""
    proc = subprocess.run([sys.executable, "-m", "tokenrouter", "serve", "server.port=0", *overrides], cwd=ROOT,
                          env={**os.environ, **ENV, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert not list(tmp.glob("tokenrouter-*"))
    return [ln for ln in proc.stderr.splitlines() if ln.strip()]
