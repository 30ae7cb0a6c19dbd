"""What each system reads of the config (tokenrouter/evals/systems.py UNREAD_KEYS), checked against what it really reads:
a key listed as unread lets reports pair one baseline run with rivals at every value of that key, so a listed
key the system did read would compare unlike runs."""

from __future__ import annotations

import asyncio
import re
from dataclasses import fields
from pathlib import Path

from tokenrouter.baselines.lockstep import LockstepSystem
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.evals.systems import LOCKSTEP_READS, UNREAD_KEYS, reads
from tokenrouter.generation import GenerationRequest

ROOT = Path(__file__).resolve().parents[2]


class RecordingRuntime(RuntimeConfig):
    """A RuntimeConfig that records which of its fields are read after construction."""

    def __getattribute__(self, name: str):  # noqa: ANN204
        try:
            seen = object.__getattribute__(self, "_seen")
        except AttributeError:  # still in __post_init__'s validation
            seen = None
        if seen is not None and name in {f.name for f in fields(RuntimeConfig)}:
            seen.add(name)
        return object.__getattribute__(self, name)


def test_lockstep_reads_only_the_runtime_keys_it_is_said_to_read() -> None:
    runtime = RecordingRuntime(trace=True)
    object.__setattr__(runtime, "_seen", set())
    specs = [ModelSpec(name="small", engine="sim"), ModelSpec(name="large", engine="sim")]

    async def scenario() -> None:
        system = LockstepSystem(specs, AlgorithmSpec("bernoulli", {"route_prob": 0.5}), runtime)
        await system.start()
        try:
            done = await asyncio.gather(*(system.generate(GenerationRequest([5, 6, 7 + i], max_new_tokens=6))
                                          for i in range(5)))
            assert all(len(r.output_ids) == 6 for r in done)
        finally:
            await asyncio.wait_for(system.close(), 10)

    asyncio.run(scenario())
    seen = object.__getattribute__(runtime, "_seen")
    assert {"max_batch_size", "max_step_tokens", "trace"} <= seen  # the recording works
    assert seen <= set(LOCKSTEP_READS), seen - set(LOCKSTEP_READS)
    assert all(not reads("lockstep", f"runtime.{name}") for name in ("delayed_batching", "thresholds", "max_wait_ms"))
    assert reads("lockstep", "runtime.max_batch_size") and reads("lockstep", "algorithm.threshold")


def test_official_systems_read_no_runtime_key() -> None:
    for module in ("official_r2r.py", "official_r2r_launch.py", "official_ensemble.py", "official_ensemble_worker.py"):
        text = (ROOT / "tokenrouter" / "baselines" / module).read_text()
        assert not re.search(r"\.runtime\b|\bRuntimeConfig\b", text), module
    assert UNREAD_KEYS["official_r2r"] == ("runtime.",) and not reads("official_r2r", "runtime.max_batch_size")
    assert UNREAD_KEYS["official_ensemble"] == ("runtime.",)
    assert reads("tokenrouter", "runtime.max_wait_ms") and reads("someone_elses", "runtime.max_wait_ms")
