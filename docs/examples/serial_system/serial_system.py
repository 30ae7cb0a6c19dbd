"""TokenRouter's runtime admitting at most `max_in_flight` requests at a time: what batching across requests buys.

A serving system is a callable taking a `SystemSetup` (the model set, algorithm, runtime switches, seed and this
system's own `system.*` fields) and returning a `tokenrouter.system.ServingSystem`; this one is a class, so the
class itself is the entry point. It is TokenRouter's front end with a gate before `generate`: the same
subservers, scheduler and hand-offs, but no batch ever holds more than `max_in_flight` requests.
"""

from __future__ import annotations

import asyncio
import time

from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.runtime.frontend import TokenRouterFrontend
from tokenrouter.system import FRONTEND_SEED, SystemSetup


class SerialSystem(TokenRouterFrontend):
    def __init__(self, setup: SystemSetup) -> None:
        setup.unknown_fields({"max_in_flight"})  # a misspelt system.* field is one line, not ignored
        super().__init__(setup.models, setup.algorithm, setup.runtime, seed=FRONTEND_SEED)
        self.max_in_flight = int(setup.system.get("max_in_flight", 1))
        self._gate: asyncio.Semaphore | None = None

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        if self._gate is None:  # made in the event loop that serves
            self._gate = asyncio.Semaphore(self.max_in_flight)
        arrived = time.perf_counter()
        async with self._gate:
            result = await super().generate(req)
        result.arrival_s = arrived  # latency and time to first token count the wait at the gate, as a client's do
        return result
