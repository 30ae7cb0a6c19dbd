"""Typed views of the Hydra config: the model set, the algorithm and the runtime switches.

Hydra/OmegaConf gives nested dicts; these dataclasses validate them once, with one clear error naming the
bad field, so the rest of the code works with plain typed objects. They travel to child processes as they are:
inside a typed config (runtime/subserver.py:SubserverConfig, engine/tp.py:RankConfig) that msgspec encodes once
in the parent and decodes once in the child, where `__post_init__` runs again as the type's own invariant
(msgspec calls it on decode); `from_dict` (unknown keys, OmegaConf containers) is for the composed config only.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import msgspec

from tokenrouter.errors import UserError
from tokenrouter.registry import ENGINES

AUTO_PROFILE = "auto"  # ModelSpec.latency_profile: measure the step latencies when the subserver starts
_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")


def _build(cls: type, data: Any, where: str) -> Any:
    """Construct dataclass `cls` from a mapping, rejecting unknown keys with a message naming `where`."""
    if data is None:
        data = {}
    if hasattr(data, "items"):
        data = dict(data.items())
    else:
        raise UserError(f"{where}: expected a mapping, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UserError(f"{where}: unknown field(s) {unknown}; known: {sorted(names)}")
    try:
        built = cls(**data)
    except TypeError as exc:
        raise UserError(f"{where}: {exc}") from None
    try:  # the types a child process will decode it with (a 4096.0 where an int goes fails here, not there)
        msgspec.convert(msgspec.to_builtins(built), cls)
    except msgspec.ValidationError as exc:
        raise UserError(f"{where}: {exc}") from None
    return built


@dataclass
class SimSpec:
    """Latency profile and token behaviour of a `sim` engine (no weights)."""

    latency_ms: float = 1.0  # base step latency
    per_request_ms: float = 0.0  # added per request in the batch (affine profile)
    per_token_ms: float = 0.0  # added per extend/prefill token beyond one per request
    profile: str | None = None  # JSON from `tokenrouter profile` (overrides the affine fields)
    vocab_size: int = 32000  # token ids the sim engine samples from
    eos_token_id: int = 2  # the id it emits at output_tokens
    output_tokens: int | None = None  # emit EOS at this output length (None: never, max_new_tokens decides)
    seed: int = 0  # its token stream's seed (the same tokens for every system)


@dataclass
class Footprint:
    """A checkpoint's size as the model set records it, so a plan (`tokenrouter plan`) can be made where the
    weights are not on disk (a laptop, an offline login node). From the checkpoint's config.json and its
    safetensors index; a model on disk is measured from its own files instead."""

    params: int  # parameters (safetensors index, tied embeddings once)
    layers: int  # num_hidden_layers
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int  # per attention head (with kv_heads and layers: KV bytes per token)


@dataclass
class ModelSpec:
    """One cooperating model: where its weights come from and how its engine runs."""

    name: str  # how the runtime, results and algorithms name this model (unique in the set)
    source: str = ""  # HF id, local dir, GGUF file, or `tiny-random:small|large`, `tiny:small|large`
    engine: str = "torch"  # torch (transformers), sglang (SGLang's ModelRunner), sim (weightless, timed), or an installed one (`tokenrouter ls engines`)
    dtype: str = "float32"  # weights and activations: float32, bfloat16 or float16
    device: str = "cpu"  # cpu, cuda or cuda:K (TP ranks take cuda:K .. K+tp-1)
    tp: int = 1  # tensor-parallel ranks (torch: one process per rank, GPU ranks on cuda:K .. K+tp-1)
    threads: int = 1  # CPU threads for this engine's process
    kv_tokens: int = 65536  # KV pool size in tokens (or derive from kv_bytes / mem_fraction)
    kv_bytes: int | None = None  # torch engine: KV pool size in bytes (set by the memory plan from mem_fraction)
    # GPU only: this model's process may use this fraction of its device's TOTAL memory (per TP rank): weights,
    # KV and an explicit reserve (context, activations). Planned jointly for the set before loading, whatever
    # the start order (engine/memory_plan.py): torch -> kv_bytes, sglang -> kv_tokens (SGLang's max_total_tokens)
    mem_fraction: float | None = None
    page_size: int = 16  # KV slots per page of the paged pool
    cuda_graph: bool = True  # engine=sglang on GPU: replay CUDA graphs for all-decode steps (always off on CPU)
    prefix_cache_tokens: int = 0  # keep released requests' KV for prefix reuse, up to this many tokens (0: off)
    # step latencies for thresholds=auto: a `tokenrouter profile` JSON, or "auto" (measured at start-up, cached)
    latency_profile: str | None = None
    sim: SimSpec = field(default_factory=SimSpec)  # engine=sim: step latencies and token behaviour (below)
    footprint: Footprint | None = None  # recorded checkpoint size, for plans made without the weights

    def __post_init__(self) -> None:
        if not self.name:
            raise UserError("models: every model needs a `name`")
        if self.footprint is not None and not isinstance(self.footprint, Footprint):
            self.footprint = _build(Footprint, self.footprint, f"model {self.name!r} footprint")
        try:
            ENGINES.require(self.engine)
        except UserError as exc:
            raise UserError(f"model {self.name!r}: {exc}") from None
        if isinstance(self.sim, dict) or hasattr(self.sim, "items"):
            self.sim = _build(SimSpec, self.sim, f"model {self.name!r} sim")
        if self.engine != "sim" and not self.source:
            raise UserError(f"model {self.name!r}: `source` is required for engine {self.engine!r}")
        if self.kv_tokens <= 0 or self.page_size <= 0 or self.threads <= 0 or self.tp <= 0:
            raise UserError(f"model {self.name!r}: kv_tokens, page_size, threads and tp must be positive")
        if self.tp > 1 and self.engine == "sim":
            raise UserError(f"model {self.name!r}: tp={self.tp} is not available on engine 'sim' (a sim engine models "
                            "a TP setting by its latencies: give it that setting's profile)")
        if not isinstance(self.cuda_graph, bool):
            raise UserError(f"model {self.name!r}: cuda_graph must be true or false, got {self.cuda_graph!r}")
        if self.prefix_cache_tokens < 0:
            raise UserError(f"model {self.name!r}: prefix_cache_tokens must be >= 0")
        if not _DEVICE.match(self.device):
            raise UserError(f"model {self.name!r}: device must be cpu, cuda or cuda:N (one device per model; "
                            f"several GPUs per model take tp: ranks use cuda:K .. K+tp-1), got {self.device!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ModelSpec:
        return _build(cls, data, f"model {dict(data).get('name', '?')!r}" if hasattr(data, "items") else "model")


@dataclass
class AlgorithmSpec:
    """Which routing algorithm and its parameters (everything but `name` goes to the class)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> AlgorithmSpec:
        data = dict(data.items()) if hasattr(data, "items") else {}
        if "name" not in data:
            raise UserError("algorithm: missing `name`")
        name = data.pop("name")
        return cls(name=str(name), params={k: plain(v) for k, v in data.items()})


@dataclass
class RuntimeConfig:
    """Scheduler and runtime switches (the ablation knobs live here)."""

    delayed_batching: bool = True  # launch a model's batch only when B_i(N) requests are ready (false: at once)
    thresholds: Any = "auto"  # "auto" | list per model | list of lists indexed by N-1
    # thresholds: launch at >= B_i(N) ready; optimal: the best launch rule on what a subserver observes (own
    # ready count, N), from the throughput model (perfmodel/local.py; falls back to thresholds without it)
    policy: str = "thresholds"
    auto_max_concurrency: int = 16  # thresholds=auto: B*(N) is searched for N up to this (larger N: last row)
    # thresholds=auto: step times at this many KV tokens per request (the workload's mean context; `tokenrouter
    # bench` sets it from the workload when null, serve keeps null: each latency profile's base context)
    auto_context_tokens: int | None = None
    max_wait_ms: float = 50.0  # a ready request never waits longer than this for its batch to fill
    max_batch_size: int = 256  # requests in one step at most
    max_step_tokens: int = 8192  # tokens in one step at most (prefills are chunked to it)
    ipc: str = "ipc"  # "ipc" (private temp dir) or "tcp"
    # ipc mode: the runtime's links over ZeroMQ ipc:// ("zmq") or "direct" AF_UNIX stream sockets (one wake-up
    # per message instead of three; opt-in until it is shown to pay end to end); tcp mode always uses CURVE zmq
    peer_link: str = "zmq"
    host: str = "127.0.0.1"  # ipc=tcp: the address the subservers bind (CURVE-authenticated)
    # a subserver with nothing to do polls without sleeping for up to this long before it blocks: a frame that
    # arrives meanwhile costs no wake-up of a sleeping process (tens of us per hop on a VM), at the price of a
    # core kept busy that long per idle spell (SGLang's scheduler spins by default; 0 = block at once); a spin
    # that was descheduled (another process wanted the core) pauses spinning for 20 ms
    spin_us: float = 0.0
    # subservers' start-up (loading + latency profile); Hub downloads happen before it starts counting
    startup_timeout_s: float = 600.0
    # one route() call may take this long (a step's decisions take microseconds to milliseconds); past it, the
    # call is interrupted (subservers; lock-step and Std. Serving check it when the call returns) and its requests
    # fail with a routing-algorithm error (0: no bound)
    route_timeout_s: float = 1.0
    # a request handed off this many times in a row without a committed token fails (an algorithm's hand-off loop)
    max_handoffs_per_token: int = 100
    # record every batch and request on one time axis (tokenrouter/trace): the bench writes trace.json into the
    # run dir, `serve` writes it to trace_file at shutdown; each model keeps at most trace_max_batches batches
    # (~250 bytes per batch row at the peak, writing trace.json: 2 models at the default, 32 rows a batch ~300 MiB)
    trace: bool = False
    trace_max_batches: int = 20_000  # batches kept per model; later ones are left out of the trace (it says so)
    trace_file: str = "trace.json"  # serve: where the trace is written at shutdown (bench: the run dir's)

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_step_tokens", "auto_max_concurrency", "trace_max_batches",
                     "max_handoffs_per_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"runtime.{name} must be an integer >= 1, got {value!r}")
        ctx = self.auto_context_tokens
        if ctx is not None and (isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1):
            raise UserError(f"runtime.auto_context_tokens must be null or an integer >= 1, got {ctx!r}")
        for name in ("max_wait_ms", "startup_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise UserError(f"runtime.{name} must be a number > 0, got {value!r}")
        if isinstance(self.spin_us, bool) or not isinstance(self.spin_us, int | float) or not self.spin_us >= 0:
            raise UserError(f"runtime.spin_us must be a number >= 0, got {self.spin_us!r}")
        budget = self.route_timeout_s
        if isinstance(budget, bool) or not isinstance(budget, int | float) or not 0 <= budget <= 1e6:
            raise UserError(f"runtime.route_timeout_s must be a number of seconds in [0, 1e6] (0: no bound), "
                            f"got {budget!r}")
        if not isinstance(self.trace, bool):
            raise UserError(f"runtime.trace must be true or false, got {self.trace!r}")
        if not isinstance(self.trace_file, str) or not self.trace_file:
            raise UserError(f"runtime.trace_file must be a file path, got {self.trace_file!r}")
        if self.policy not in ("thresholds", "optimal"):
            raise UserError(f"runtime.policy must be 'thresholds' or 'optimal', got {self.policy!r}")
        if self.ipc not in ("ipc", "tcp"):
            raise UserError(f"runtime.ipc must be 'ipc' or 'tcp', got {self.ipc!r}")
        if self.peer_link not in ("direct", "zmq"):
            raise UserError(f"runtime.peer_link must be 'direct' or 'zmq', got {self.peer_link!r}")

    @property
    def direct_links(self) -> bool:
        """The runtime's links are direct AF_UNIX streams (ipc with peer_link=direct), else ZeroMQ."""
        return self.ipc == "ipc" and self.peer_link == "direct"

    @classmethod
    def from_dict(cls, data: Any) -> RuntimeConfig:
        return _build(cls, {k: plain(v) for k, v in (dict(data.items()) if data else {}).items()}, "runtime")


def plain(value: Any) -> Any:
    """OmegaConf containers to plain Python (msgpack- and dataclass-friendly)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, DictConfig | ListConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return value


def model_specs(models_cfg: Any) -> list[ModelSpec]:
    """The `models` config group -> ordered specs (entry model first), names unique."""
    members = plain(models_cfg.get("members") if hasattr(models_cfg, "get") else None)
    if not members:
        raise UserError("models: config needs a non-empty `members` list (entry model first)")
    specs = [ModelSpec.from_dict(m) for m in members]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UserError(f"models: names must be unique, got {names}")
    engine = models_cfg.get("engine")
    other = [s.name for s in specs if engine is not None and s.engine != engine]
    if other:  # a set whose members name their own engines: the override would be silently ignored
        raise UserError(f"models.engine={engine}: model set {models_cfg.get('name')!r} sets each member's engine "
                        f"itself ({', '.join(f'{s.name}: {s.engine}' for s in specs)}); override "
                        f"models.members.N.engine instead")
    return specs


def seed_value(value: Any) -> int:
    """The experiment `seed` as an int (Hydra passes `seed=abc` through as a string): bad -> one clear line."""
    text = str(value).strip()
    if isinstance(value, bool) or not isinstance(value, int | str) or not text.lstrip("-").isdigit():
        raise UserError(f"seed must be an integer, got {value!r}")
    return int(text)
