"""Shared runtime test helpers: front ends started on one private event loop (module-scoped fixtures share
them without an asyncio pytest plugin) and a reference greedy decoder that drives an engine directly."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any

from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.base import Engine, StepItem
from tokenrouter.runtime.frontend import TokenRouterFrontend


class Frontends:
    """Several front ends started concurrently (process start-up dominates test time) on one loop."""

    def __init__(self, configs: dict[str, tuple[list[ModelSpec], AlgorithmSpec, RuntimeConfig]]) -> None:
        self.loop = asyncio.new_event_loop()
        self.fe = {key: TokenRouterFrontend(m, a, r) for key, (m, a, r) in configs.items()}
        try:
            self.run(self._each("start"))
        except BaseException:
            self.close()
            raise

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self._each("close"))
        self.loop.close()

    async def _each(self, method: str) -> None:
        await asyncio.gather(*(getattr(f, method)() for f in self.fe.values()))


def greedy_reference(engine: Engine, prompt: list[int], max_new: int, rid: str = "ref") -> list[int]:
    """The model's own greedy output, one request at a time straight through the engine (no runtime)."""
    out: list[int] = []
    new = list(prompt)
    for _ in range(max_new):
        tok = engine.step([StepItem(rid, new, prompt_len=len(prompt))]).next_tokens[0]
        out.append(int(tok))
        if tok in engine.eos_token_ids:
            break
        new = [int(tok)]
    engine.release(rid)
    return out


@contextlib.contextmanager
def user_algorithms_importable() -> Iterator[None]:
    """tests/runtime on sys.path while front ends start: subservers inherit it and import the test-only
    algorithms in user_algorithms/ as a user's own module would be."""
    here = str(Path(__file__).parent)
    sys.path.insert(0, here)
    try:
        yield
    finally:
        sys.path.remove(here)


@contextlib.asynccontextmanager
async def started(*systems: Any) -> AsyncIterator[None]:
    """Every system started at once (start-up dominates the tests that compare systems), all closed after."""
    try:
        await asyncio.gather(*(s.start() for s in systems))
        yield
    finally:
        await asyncio.gather(*(s.close() for s in systems))


async def generate_on_each(systems: tuple[Any, ...], reqs: list[Any], timeout_s: float) -> list[list[Any]]:
    """The same requests on every system concurrently: one list of results per system, in request order."""
    runs = (asyncio.gather(*(s.generate(r) for r in reqs)) for s in systems)
    return [list(rs) for rs in await asyncio.wait_for(asyncio.gather(*runs), timeout_s)]
