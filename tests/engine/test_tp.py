"""Tensor parallelism on the torch engine (real rank processes, gloo on this CPU): a tp=2 engine behaves
exactly like tp=1 over mixed batches, park + extend and truncate; bad settings are one line; a dead rank
stops the engine instead of hanging it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import EngineFailure, StepItem
from tokenrouter.engine.factory import build_engine, prepare_models
from tokenrouter.errors import UserError


def _spec(source: str, tp: int) -> ModelSpec:
    return ModelSpec(name=f"tp{tp}", source=source, engine="torch", kv_tokens=2048, tp=tp)


def _scenario(engine) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Prefills joining mid-way, decodes, a request parked for 3 steps then resumed by a 4-token extend, and
    a truncate + re-extend; returns every step's tokens and logits."""
    tokens: list[list[int]] = []
    logits: list[torch.Tensor] = []
    out: dict[str, list[int]] = {"a": [], "b": [], "c": []}

    def step(items: list[StepItem]) -> None:
        res = engine.step(items)
        tokens.append(list(res.next_tokens))
        logits.append(res.logits)
        for it, tok in zip(items, res.next_tokens, strict=True):
            out[it.rid].append(int(tok))

    step([StepItem("a", [5, 6, 7, 8]), StepItem("b", [9, 10])])
    step([StepItem("a", [out["a"][-1]]), StepItem("b", [out["b"][-1]]), StepItem("c", [11, 12, 13])])
    for _ in range(3):  # b is parked (another model generates for it)
        step([StepItem("a", [out["a"][-1]]), StepItem("c", [out["c"][-1]])])
    step([StepItem("b", [out["b"][-1], 20, 21, 22]), StepItem("a", [out["a"][-1]])])  # the extend
    engine.truncate("a", 5)  # a peer disagreed after position 5
    step([StepItem("a", [30, 31]), StepItem("c", [out["c"][-1]])])
    engine.release("b")
    step([StepItem("b", [1, 2, 3])])  # released and reused
    return tokens, logits


@pytest.mark.parametrize("source", ["tiny-random:large", "tiny-random:small"])
def test_tp2_equals_tp1_step_by_step(source: str) -> None:
    ref_engine = build_engine(_spec(source, 1))
    ref_tokens, ref_logits = _scenario(ref_engine)
    engine = build_engine(_spec(source, 2))
    try:
        assert engine.seq_len("a") == 0 and engine.vocab_size == ref_engine.vocab_size
        tokens, logits = _scenario(engine)
        assert engine.seq_len("a") == ref_engine.seq_len("a") == 7
        assert engine.tokens_used() == ref_engine.tokens_used()
        emb = engine.input_embeddings()(torch.tensor([3, 4]))  # a plain local module: no collective on rank 0
        assert torch.allclose(emb, ref_engine.input_embeddings()(torch.tensor([3, 4])))
    finally:
        engine.close()
    assert tokens == ref_tokens
    for a, b in zip(logits, ref_logits, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_bad_tp_settings_are_one_line() -> None:
    """The TP checks run once, where the set is planned (prepare_models), before any subserver or rank."""
    with pytest.raises(UserError, match="tp=4 must divide its 8 attention heads and 2 KV heads"):
        prepare_models([_spec("tiny-random:large", 4)])
    with pytest.raises(UserError, match="not available on engine 'sim'"):
        ModelSpec(name="s", engine="sim", tp=2)


def test_a_dead_rank_fails_the_engine_not_a_request() -> None:
    engine = build_engine(_spec("tiny-random:small", 2))
    try:
        engine.step([StepItem("a", [1, 2, 3])])
        worker = engine.procs[0]
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(5)
        with pytest.raises(EngineFailure, match="rank"):
            engine.step([StepItem("a", [4])])
    finally:
        engine.close()


@pytest.mark.slow  # the step-by-step and runtime TP tests cover the same equality
def test_generate_cli_tp2_equals_tp1() -> None:
    def run(tp: int) -> str:
        proc = subprocess.run([sys.executable, "-m", "tokenrouter", "generate", "--model", "tiny-random:large",
                               "--tp", str(tp), "--prompt", "12+34=", "--prompt", "x", "--max-new-tokens", "10",
                               "--json"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert run(2) == run(1)


def test_a_failure_after_the_broadcast_fails_the_engine_and_a_bad_item_fails_before_it() -> None:
    """Rank 0 failing inside a broadcast step (an OOM is asymmetric when rank 0 shares its GPU) must stop the
    engine: the worker ran or sits inside the step's collectives, so a per-request retry would desync or hang
    the group. A malformed item fails on rank 0 before anything is broadcast, and the group goes on."""
    engine = build_engine(_spec("tiny-random:small", 2))
    try:
        first = engine.step([StepItem("a", [1, 2, 3])]).next_tokens
        with pytest.raises(ValueError, match="token id out of range"):
            engine.step([StepItem("b", [engine.vocab_size + 5])])
        assert all(p.poll() is None for p in engine.procs)  # the worker never saw it
        engine.step([StepItem("a", [int(first[0])])])  # still in step with its worker

        def oom(*_: object, **__: object) -> None:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

        engine.inner.step = oom  # type: ignore[method-assign]
        with pytest.raises(EngineFailure, match="step failed on rank 0 after it was broadcast .*out of memory"):
            engine.step([StepItem("a", [4])])
    finally:
        engine.close()


def test_rank0s_gpu_is_the_current_device_of_every_thread_that_steps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 starts in a helper thread and is stepped from another (the subserver's main thread, lock-step's
    driver); CUDA's current device is per thread. On CPU the engine has none: given one, each stepping thread
    sets it once, before the step reaches the ranks."""
    import threading

    engine = build_engine(_spec("tiny-random:small", 2))
    bound: list[tuple[str, int]] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: bound.append((d, threading.get_ident())))
    try:
        assert engine.cuda_device is None
        engine.step([StepItem("a", [1, 2, 3])])
        assert bound == []  # a CPU group binds nothing
        engine.cuda_device = "cuda:3"  # as for a model placed on cuda:3

        def driver() -> None:
            engine.step([StepItem("b", [4, 5])])
            engine.truncate("b", 1)
            engine.release("b")

        thread = threading.Thread(target=driver)
        thread.start()
        thread.join()
        engine.step([StepItem("a", [6])])
        assert [d for d, _ in bound] == ["cuda:3", "cuda:3"]  # once per thread
        assert len({t for _, t in bound}) == 2 and threading.get_ident() in {t for _, t in bound}
    finally:
        engine.close()


def test_an_sglang_group_is_refused_on_cpu_before_any_rank_starts() -> None:
    """engine=sglang with tp > 1 goes through the same rank-0 orchestration (build_engine -> TensorParallelEngine);
    SGLang's collectives need CUDA, so on CPU the set is refused with one line where it is planned, before any
    subserver or rank process starts (the ranks take their spec as checked)."""
    before = set(_children())
    spec = ModelSpec(name="big", source="tiny-random:small", engine="sglang", kv_tokens=2048, tp=2)
    with pytest.raises(UserError, match="SGLang tensor parallelism needs CUDA"):
        prepare_models([spec])
    assert set(_children()) == before


def test_rank_config_round_trips_and_a_malformed_one_is_one_line() -> None:
    """A rank's config crosses typed: what rank 0 encodes (children.spawn) the rank decodes into equal objects;
    a blob that is not one is one line on stderr and exit status 1."""
    import msgspec

    from tokenrouter.children import child_env, decode_config
    from tokenrouter.engine.tp import RankConfig

    cfg = RankConfig(_spec("tiny-random:small", 2), 1, "cuda:3", "/tmp/store", [7, 8], {"LOCAL_RANK": "3"})
    back = decode_config(msgspec.msgpack.encode(cfg), RankConfig)
    assert back == cfg and isinstance(back.spec, ModelSpec) and back.spec.tp == 2
    for blob in (b"\xc1", msgspec.msgpack.encode({"spec": {"name": "x"}, "rank": 1})):
        with pytest.raises(UserError, match=r"^malformed RankConfig on stdin \(\d+ bytes\): "):
            decode_config(blob, RankConfig)
    proc = subprocess.run([sys.executable, "-m", "tokenrouter.engine.tp_worker"], input=b"\xc1", capture_output=True,
                          env=child_env(), timeout=120)
    err = proc.stderr.decode().strip()
    assert proc.returncode == 1 and len(err.splitlines()) == 1 and "malformed RankConfig on stdin" in err


def _children() -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]
