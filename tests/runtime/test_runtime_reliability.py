"""Failure behaviour with real processes: a killed subserver fails in-flight requests fast and clearly,
signals leave no process or socket file behind, thresholds can never deadlock, bad models fail start-up."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest
from tokenrouter.runtime.frontend import RuntimeFailure, TokenRouterFrontend

SIM2 = [ModelSpec(name="small", engine="sim", sim=SimSpec(latency_ms=2.0, seed=1, vocab_size=300)),
        ModelSpec(name="large", engine="sim", sim=SimSpec(latency_ms=6.0, seed=2, vocab_size=300))]
BERNOULLI = AlgorithmSpec("bernoulli", {"route_prob": 0.35})


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"  # exited, not yet reaped by its parent


def test_killed_subserver_fails_in_flight_requests_within_5s_and_front_end_closes() -> None:
    async def scenario() -> None:
        fe = TokenRouterFrontend(SIM2, BERNOULLI, RuntimeConfig(thresholds=[1, 1]))
        await fe.start()
        sock_dir = fe.socket_dir
        assert sock_dir is not None and sock_dir.is_dir() and (sock_dir.stat().st_mode & 0o777) == 0o700
        reqs = [GenerationRequest([1, 2, i], max_new_tokens=20_000, seed=i) for i in range(4)]
        tasks = [asyncio.create_task(fe.generate(r)) for r in reqs]
        await asyncio.sleep(0.5)
        assert not any(t.done() for t in tasks)
        killed = time.perf_counter()
        os.kill(fe.pids[1], signal.SIGKILL)
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5.0)
        assert time.perf_counter() - killed < 5.0
        for exc in outcomes:
            assert isinstance(exc, RuntimeFailure) and "subserver 'large'" in str(exc) and "died" in str(exc)
        for _ in range(100):  # the front end shuts itself down
            if all(_gone(pid) for pid in fe.pids) and not sock_dir.exists():
                break
            await asyncio.sleep(0.05)
        assert all(_gone(pid) for pid in fe.pids) and not sock_dir.exists()
        with pytest.raises(RuntimeFailure, match="subserver 'large'"):
            await fe.generate(reqs[0])
        await fe.close()  # idempotent

    asyncio.run(scenario())


# The script restores Python's SIGINT handler as a foreground program has it: a non-interactive shell starts
# background jobs with SIGINT ignored, and a test run started that way passes the disposition down to here.
SCRIPT = textwrap.dedent("""
    import asyncio, json, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
    from tokenrouter.generation import GenerationRequest
    from tokenrouter.runtime.frontend import TokenRouterFrontend

    async def main():
        models = [ModelSpec(name="a", engine="sim", sim=SimSpec(latency_ms=1.0)),
                  ModelSpec(name="b", engine="sim", sim=SimSpec(latency_ms=2.0, seed=5))]
        async with TokenRouterFrontend(models, AlgorithmSpec("bernoulli", {"route_prob": 0.5})) as fe:
            print(json.dumps({"pids": fe.pids, "dir": str(fe.socket_dir)}), flush=True)
            while True:
                await fe.generate_many([GenerationRequest([1, 2, 3], max_new_tokens=40, seed=i) for i in range(4)])

    if __name__ == "__main__":
        asyncio.run(main())
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_front_end_process_leaves_no_process_or_socket_file(tmp_path: Path, sig: int) -> None:
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        info = json.loads(line)
        time.sleep(0.5)  # mid-run
        assert proc.poll() is None and Path(info["dir"]).is_dir()
        proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            pytest.fail("no exit 20 s after the signal; " + " ".join(
                ln for ln in status.splitlines() if ln.startswith(("SigBlk", "SigIgn", "SigCgt", "State"))))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in info["pids"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in info["pids"])
    assert not Path(info["dir"]).exists()


def test_thresholds_that_look_infeasible_cannot_deadlock_over_tcp() -> None:
    """B = [8, 8] with N <= 3 and no max-wait rescue: the runtime clips to feasible thresholds per N."""

    async def scenario() -> None:
        rt = RuntimeConfig(thresholds=[8, 8], max_wait_ms=1e9, ipc="tcp")
        async with TokenRouterFrontend(SIM2, BERNOULLI, rt) as fe:
            assert fe.socket_dir is None
            async def client(c: int) -> int:
                done = 0
                for k in range(3):
                    r = await fe.generate(GenerationRequest([c, k + 1], max_new_tokens=30, seed=10 * c + k))
                    done += len(r.output_ids)
                return done

            totals = await asyncio.wait_for(asyncio.gather(*(client(c) for c in range(3))), 30)
            assert totals == [90, 90, 90]
            assert fe.thresholds(3) == [2, 2] and fe.thresholds(1) == [1, 1]

    asyncio.run(scenario())


def test_bad_model_source_fails_before_any_subserver_starts() -> None:
    models = [SIM2[0], ModelSpec(name="large", source="/no/such/model/dir", engine="torch")]
    with pytest.raises(UserError, match="model not found: '/no/such/model/dir'"):
        TokenRouterFrontend(models, BERNOULLI, RuntimeConfig(startup_timeout_s=60))


def test_model_failing_to_load_fails_start_up_with_the_childs_message(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")  # passes the front end's check, fails to load in the child
    models = [SIM2[0], ModelSpec(name="large", source=str(tmp_path), engine="torch")]

    async def scenario() -> None:
        fe = TokenRouterFrontend(models, BERNOULLI, RuntimeConfig(startup_timeout_s=60))
        with pytest.raises(RuntimeFailure, match=f"model 'large' failed to start: cannot load model from {tmp_path}"):
            await fe.start()
        assert all(_gone(pid) for pid in fe.pids) and fe.socket_dir is None

    asyncio.run(scenario())
