"""A weightless engine that behaves like a deterministic model with a chosen step latency.

Why: the throughput-model validation and scale studies need step latencies of GPU models (6.0 / 27.9 ms) and
many concurrent requests on a 2-core machine. Each step sleeps exactly L(batch size, new tokens) and emits
the token a fixed pseudo-random "model" would: a function of (sim seed, the request's whole token prefix,
sampling seed when not greedy). So two sim engines with different seeds disagree like two real models, the
same prefix always yields the same token (KV catch-up after a hand-off is checkable), and per-request
lengths are tracked so release / truncate / capacity behave as in a real engine.
"""

from __future__ import annotations

import time

from tokenrouter.config import ModelSpec, SimSpec
from tokenrouter.engine.base import ALL_STEP_OUTPUTS, Engine, StepItem, StepOutput, StepOutputs
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.errors import CapacityError, UserError

_MASK = (1 << 64) - 1
_SPIN_S = 0.001  # sleep coarsely until this close to the deadline, then spin (sleep overshoots ~0.1 ms)


def _mix(x: int) -> int:
    """splitmix64 finalizer: a cheap, well-spread 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def sim_latency(sim: SimSpec) -> LatencyProfile:
    """The step-latency profile a SimSpec describes (a `tokenrouter profile` JSON wins over the affine fields)."""
    if sim.profile:
        return LatencyProfile.from_json(sim.profile)
    return LatencyProfile(base_ms=sim.latency_ms, per_request_ms=sim.per_request_ms, per_token_ms=sim.per_token_ms)


def sleep_until(deadline: float) -> None:
    """Wait until `time.perf_counter()` reaches `deadline` with sub-0.1 ms error, spinning only briefly."""
    remaining = deadline - time.perf_counter()
    if remaining > _SPIN_S:
        time.sleep(remaining - _SPIN_S)
    while time.perf_counter() < deadline:
        pass


class SimEngine(Engine):
    """Sleeps a latency profile per step; tokens depend on (seed, prefix) only; EOS at `output_tokens`."""

    def __init__(
        self,
        name: str,
        latency: LatencyProfile,
        *,
        vocab_size: int = 32000,
        eos_token_id: int = 2,
        output_tokens: int | None = None,
        seed: int = 0,
        kv_tokens: int = 65536,
    ) -> None:
        if vocab_size < 3 or not 0 <= eos_token_id < vocab_size:
            raise UserError(f"sim model {name!r}: need vocab_size >= 3 and 0 <= eos_token_id < vocab_size")
        if output_tokens is not None and output_tokens < 1:
            raise UserError(f"sim model {name!r}: output_tokens must be >= 1 or null")
        self.name = name
        self.latency = latency
        self.vocab_size = vocab_size
        self.eos_token_ids = (eos_token_id,)
        self.output_tokens = output_tokens
        self.seed = seed
        self.kv_tokens = kv_tokens
        # per request: running prefix hash after each held token (len == tokens held in "KV")
        self._prefix_hash: dict[str, list[int]] = {}
        self._used = 0

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> SimEngine:
        sim = spec.sim
        return cls(spec.name, sim_latency(sim), vocab_size=sim.vocab_size, eos_token_id=sim.eos_token_id,
                   output_tokens=sim.output_tokens, seed=sim.seed, kv_tokens=spec.kv_tokens)

    def step(self, items: list[StepItem], outputs: StepOutputs = ALL_STEP_OUTPUTS) -> StepOutput:
        start = time.perf_counter()
        new_tokens = 0
        for it in items:  # one pass: this runs on every hand-off's path, twice per round trip
            if not it.token_ids:
                raise ValueError("sim engine: every step item needs at least one new token")
            new_tokens += len(it.token_ids)
        if new_tokens > self.tokens_free():
            raise CapacityError(f"sim model {self.name!r}: step needs {new_tokens} KV tokens, "
                                f"{self.tokens_free()} free of {self.kv_tokens}")
        rids: list[str] = []
        next_tokens: list[int] = []
        for it in items:
            rids.append(it.rid)
            next_tokens.append(self._append_and_sample(it))
        latency_ms = self.latency.step_ms(len(items), new_tokens)
        if latency_ms > 0:
            sleep_until(start + latency_ms / 1000.0)
        return StepOutput(rids, next_tokens)

    def _append_and_sample(self, item: StepItem) -> int:
        hashes = self._prefix_hash.setdefault(item.rid, [])
        h = hashes[-1] if hashes else _mix(self.seed)
        for i, tok in enumerate(item.token_ids):
            if not 0 <= tok < self.vocab_size:
                self._used += i  # the tokens appended before it hold KV (a truncate or release gives them back)
                raise ValueError(f"sim model {self.name!r}: token id {tok} outside vocab [0, {self.vocab_size})")
            h = _mix(h ^ (tok + 1))
            hashes.append(h)
        self._used += len(item.token_ids)
        eos = self.eos_token_ids[0]
        if self.output_tokens is not None and len(hashes) - item.prompt_len >= self.output_tokens - 1 \
                and eos not in item.banned_ids:
            return eos
        if not item.sampling.greedy:
            h = _mix(h ^ _mix(item.sampling.seed or 0))
        tok = h % (self.vocab_size - 1)  # never EOS by chance: EOS only at `output_tokens`
        tok = tok + 1 if tok >= eos else tok
        if tok in item.banned_ids:  # the next id up that is neither banned nor EOS
            tok = next((c for c in (range(tok, tok + self.vocab_size)) if c % self.vocab_size != eos
                        and c % self.vocab_size not in item.banned_ids), tok) % self.vocab_size
        return tok

    def release(self, rid: str) -> None:
        self._used -= len(self._prefix_hash.pop(rid, ()))

    def truncate(self, rid: str, length: int) -> None:
        hashes = self._prefix_hash.get(rid)
        if hashes is not None and length < len(hashes):
            self._used -= len(hashes) - max(length, 0)
            del hashes[max(length, 0):]

    def seq_len(self, rid: str) -> int:
        return len(self._prefix_hash.get(rid, ()))

    def tokens_free(self) -> int:
        return self.kv_tokens - self._used

    def tokens_used(self) -> int:
        return self._used
