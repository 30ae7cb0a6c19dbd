"""`system=std_serving`: the paper's "Std. Serving" baseline.

Each model runs behind its own independent single-model server (`tokenrouter serve` with that model alone
and algorithm `stay`, or a real SGLang server: `system.server=sglang`), started as real subprocesses.
An external dispatcher (here, in the benchmark process) keeps every request's tokens and, for every output
token, POSTs the WHOLE prefix to the current model's server `/generate` asking for ONE token (plus the
last step's logits / hidden state when the algorithm needs them). It then runs the algorithm's own
route() / keeps_token() / send() / receive() unchanged, with one algorithm instance per model side exactly
as the TokenRouter subservers do, to decide where the next token comes from. So greedy outputs equal
TokenRouter's; only the serving path differs.

Like SGLang's radix cache, each of our servers keeps finished requests' KV in a prefix cache
(`system.prefix_cache_tokens`, see tokenrouter/engine/prefix_cache.py), so resending a prefix costs an
extend of the new tokens, not a prefill. What remains per token is bookkeeping: HTTP + JSON both ways,
request admission, scheduling and prefix matching on the server, and the dispatcher's own work. stats()
reports that per-token breakdown (`per_token_ms`), the figure the paper measured (Table 10: 37.2 ms per
small-model step of which 1.56 ms inference); on SGLang servers the server side is split further by SGLang's
own scheduler stage timers (prefix matching and KV allocation, the forward, radix insert and release, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import torch

from tokenrouter import handoff
from tokenrouter.algorithms import algorithm_class, build_algorithm
from tokenrouter.api import AlgorithmFailure, RouterRequest, RoutingAlgorithm, StepResult
from tokenrouter.baselines.http_model import (
    generate_body,
    http_client,
    server_eos_ids,
    server_error,
    sglang_stage_stats,
    start_server,
    stop_servers,
)
from tokenrouter.baselines.model_servers import KINDS, ModelServer, trace_path
from tokenrouter.baselines.sglang_server import SGLangServerOptions
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.factory import prepare_models
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.runtime.ipc import private_dir
from tokenrouter.runtime.plugin_guard import (
    RouteClock,
    RouteOverBudget,
    algorithm_error,
    call_failure,
    destinations,
    handoff_loop,
)
from tokenrouter.stats import ModelCounters
from tokenrouter.system import ServingSystem, SystemSetup
from tokenrouter.trace.chrome import records_from_chrome
from tokenrouter.trace.record import TraceLog

log = logging.getLogger(__name__)


@dataclass
class StdServingOptions:
    server: str = "tokenrouter"  # tokenrouter | sglang
    prefix_cache_tokens: int = 1 << 18  # per tokenrouter server; 0 = off (every token re-prefills the prefix)
    return_logits: bool | str = "auto"  # auto: what the algorithm declares it reads (its `needs.step_outputs`)
    return_hidden_states: bool | str = "auto"
    startup_timeout_s: float = 300.0  # our servers (SGLang's: sglang.startup_timeout_s)
    request_timeout_s: float = 600.0
    sglang: SGLangServerOptions = field(default_factory=SGLangServerOptions)

    def __post_init__(self) -> None:
        if self.server not in KINDS:
            raise UserError(f"system std_serving: server must be one of {KINDS}, got {self.server!r}")
        if not isinstance(self.sglang, SGLangServerOptions):
            self.sglang = SGLangServerOptions.from_dict(self.sglang, "system std_serving")
        if self.prefix_cache_tokens < 0:
            raise UserError("system std_serving: prefix_cache_tokens must be >= 0")
        for name in ("return_logits", "return_hidden_states"):
            if getattr(self, name) not in (True, False, "auto"):
                raise UserError(f"system std_serving: {name} must be true, false or auto")

    def outputs(self, algorithm: str) -> tuple[bool, bool]:
        """(ask the servers for logits, for hidden states) for the named algorithm."""
        need = algorithm_class(algorithm).needs.step_outputs
        logits = "logits" in need if self.return_logits == "auto" else bool(self.return_logits)
        hidden = "hidden" in need if self.return_hidden_states == "auto" else bool(self.return_hidden_states)
        return logits, hidden


@dataclass
class StdServingModelStats(ModelCounters):
    """Per model: the shared counters plus the per-token cost breakdown (ms per dispatcher step) and the
    server's own counters (ours: engine steps and busy time; SGLang's: its scheduler stage seconds too)."""

    per_token_ms: dict[str, float] | None = None
    server: dict[str, float] | None = None


@dataclass
class _Timing:
    """Per model, summed over dispatcher steps (one step = one token asked of one server)."""

    steps: int = 0
    dispatch_s: float = 0.0  # the whole step at the dispatcher: build request .. routing decision applied
    http_s: float = 0.0  # POST round trip, response parsed
    server_s: float = 0.0  # the server's own handling time (its meta_info.e2e_latency)
    route_s: float = 0.0  # tensors + route / keeps_token / send / receive

    def add(self, dispatch: float, http: float, server: float, route: float) -> None:
        self.steps += 1
        self.dispatch_s += dispatch
        self.http_s += http
        self.server_s += server
        self.route_s += route


@dataclass
class _Step:
    token: int
    logits: torch.Tensor | None
    hidden: torch.Tensor | None
    http_s: float
    server_s: float


class _ModelInfo:
    """Stands in for a model's engine when the dispatcher calls an algorithm's bind(): routers read the
    model's sizes and input embedding (R2R embeds the predicted token), read here from the checkpoint; the
    dispatcher itself runs no model, only (for SGLang servers, which return hidden states but not logits) the
    output head over the returned hidden state."""

    device = torch.device("cpu")

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self._config: Any = None
        self._embeddings: torch.nn.Module | None = None
        self._head: torch.nn.Module | None = None

    def _hf_config(self) -> Any:
        if self._config is None:
            from transformers import AutoConfig

            from tokenrouter.engine.loader import resolve_source

            src = resolve_source(self.spec.source)
            extra = {"gguf_file": src.gguf_file} if src.gguf_file else {}
            try:
                self._config = AutoConfig.from_pretrained(src.location, local_files_only=src.is_local, **extra)
            except Exception as exc:  # transformers raises many types; one line naming the model instead
                raise UserError(f"std_serving: cannot read the config of model {self.name!r}: {exc}") from None
        return self._config

    @property
    def hidden_size(self) -> int:
        return 0 if self.spec.engine == "sim" else int(self._hf_config().hidden_size)

    @property
    def vocab_size(self) -> int:
        return self.spec.sim.vocab_size if self.spec.engine == "sim" else int(self._hf_config().vocab_size)

    def _load(self) -> None:
        """The input embedding and output head, and nothing else: read as two tensors from a local
        checkpoint's safetensors (a 32B model's head is 1.5 GB, the model 64 GB), else from the loaded model."""
        if self._embeddings is not None:
            return
        from tokenrouter.engine.loader import load_model, torch_dtype

        embed = _safetensor(self.spec.source, "model.embed_tokens.weight")
        head = embed if getattr(self._hf_config(), "tie_word_embeddings", False) else \
            _safetensor(self.spec.source, "lm_head.weight")
        if embed is None or head is None:
            model = load_model(self.spec.source, self.spec.dtype, "cpu")
            self._embeddings, self._head = model.get_input_embeddings(), model.get_output_embeddings()
            return
        dtype = torch_dtype(self.spec.dtype)
        self._embeddings = torch.nn.Embedding.from_pretrained(embed.to(dtype))
        self._head = torch.nn.Linear(head.shape[1], head.shape[0], bias=False, dtype=dtype)
        self._head.weight = torch.nn.Parameter(head.to(dtype), requires_grad=False)

    def input_embeddings(self) -> torch.nn.Embedding | None:
        if self.spec.engine == "sim":
            return None
        self._load()
        return self._embeddings

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The next-token logits of a returned final hidden state ([1, hidden] -> [1, vocab], float32): the
        server's own last step (SGLang's hidden state is the final-norm output, as ours)."""
        self._load()
        assert self._head is not None
        weight = self._head.weight
        return self._head(hidden.to(weight.dtype)).float()


class StdServingSystem(ServingSystem):
    """Std. Serving: single-model servers + an external per-token dispatcher (see the module docstring)."""

    def __init__(self, models: list[ModelSpec], algorithm: AlgorithmSpec, runtime: RuntimeConfig, seed: int = 0,
                 options: StdServingOptions | None = None) -> None:
        self.opts = options or StdServingOptions()
        if self.opts.server == "tokenrouter":
            models = [replace(m, prefix_cache_tokens=self.opts.prefix_cache_tokens) for m in models]
        self.specs = list(models)
        self.model_names = [m.name for m in models]
        self.algorithm_spec = algorithm
        self.runtime = runtime
        # route()'s budget, checked when it returns (it runs on the event loop, which an interrupt would break)
        self._clocks = [RouteClock(runtime.route_timeout_s, interrupt=False) for _ in models]
        self.seed = seed
        self.want_logits, self.want_hidden = self.opts.outputs(algorithm.name)
        # An SGLang server returns hidden states but no logits: the dispatcher applies the model's output head
        self.logits_from_hidden = self.opts.server == "sglang" and self.want_logits
        # what each server is asked to return with its token
        self.ask_logits = self.want_logits and not self.logits_from_hidden
        self.ask_hidden = self.want_hidden or self.logits_from_hidden
        self.infos: list[_ModelInfo] = []
        self.algorithms: list[RoutingAlgorithm] = []
        self.servers: list[ModelServer] = []
        self.eos_ids: list[int] = []
        self._client: httpx.AsyncClient | None = None
        self._dir: Path | None = None
        self._ids = itertools.count()
        self._timing = [_Timing() for _ in models]
        self._committed = [0] * len(models)
        self._handoffs = [0] * len(models)
        self._baseline: list[dict[str, float] | None] = [None] * len(models)  # server counters at reset_stats()
        # runtime.trace: our servers record their batches; SGLang's record none (the trace shows requests only)
        self._trace = TraceLog(self.model_names, runtime.trace_max_batches, "std_serving") \
            if runtime.trace and self.opts.server == "tokenrouter" else None

    # ---- life cycle ----------------------------------------------------------------------------------------
    async def start(self) -> None:
        # Build and bind the algorithm sides first: a bad name, parameter or router fails before any server starts.
        self.algorithms = [build_algorithm(self.algorithm_spec.name, i, self.model_names, self.algorithm_spec.params)
                           for i in range(len(self.specs))]
        logging.getLogger("httpx").setLevel(logging.WARNING)  # else one INFO line per token under Hydra
        self.infos = [_ModelInfo(spec) for spec in self.specs]
        await asyncio.to_thread(lambda: [a.bind(i) for a, i in zip(self.algorithms, self.infos, strict=True)])
        if self.opts.server == "sglang":  # models downloaded, and KV planned jointly: never by start order
            self.specs = await asyncio.to_thread(prepare_models, self.specs)
        self._dir = private_dir()
        timeout = self.opts.startup_timeout_s
        try:
            launches = [start_server(self.opts.server, s, self.runtime, self.seed, self._dir, i, self.opts.sglang,
                                     self.ask_hidden, timeout) for i, s in enumerate(self.specs)]
            started = await asyncio.gather(*launches, return_exceptions=True)
            self.servers = [s for s in started if isinstance(s, ModelServer)]
            failed = [e for e in started if isinstance(e, BaseException)]
            if failed:
                raise failed[0]
            self._client = http_client(self.opts.request_timeout_s)
            self.eos_ids = await server_eos_ids(self.servers[0], self.specs[0], self._client)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop every server (no process left) and remove the config/log directory. Idempotent."""
        client, servers, workdir = self._client, self.servers, self._dir
        self._client, self.servers, self._dir = None, [], None
        await stop_servers(client, servers, workdir, self._read_traces if self._trace is not None else None)

    def trace_log(self) -> TraceLog | None:
        return self._trace

    def _read_traces(self, workdir: Path) -> None:
        """The batches each model's server traced (written when it stopped), as that model's track."""
        from tokenrouter.trace.summary import load_trace

        assert self._trace is not None
        for i, name in enumerate(self.model_names):
            try:
                self._trace.add(records_from_chrome(load_trace(trace_path(workdir, i)), i))
            except UserError as exc:
                log.warning("runtime.trace: model %r server's trace is missing: %s", name, exc)

    # ---- the dispatcher ------------------------------------------------------------------------------------
    async def generate(self, req: GenerationRequest) -> GenerationResult:
        if self._client is None:
            raise RuntimeError("std_serving system is not running (call start() first)")
        if not req.prompt_ids:
            raise UserError("request has an empty prompt")
        arrival = time.perf_counter()
        rid = f"std-{next(self._ids)}"
        views: list[RouterRequest | None] = [None] * len(self.specs)
        views[0] = RouterRequest(rid, list(req.prompt_ids), [], req.max_new_tokens, req.sampling, req.seed,
                                 min_new_tokens=req.min_new_tokens)
        stop = set(self.eos_ids if req.stop_token_ids is None else req.stop_token_ids)
        per_model = [0] * len(self.specs)
        at, handoffs, stalled, first_token, reason = 0, 0, 0, None, ""
        commits: list[tuple[float, int, str]] = []
        while not reason:
            t0, src = time.perf_counter(), at
            view = views[at]
            assert view is not None
            step = await self._one_token(at, view, stop)
            t1 = time.perf_counter()
            if self.logits_from_hidden and step.hidden is not None:
                step.logits = self.infos[at].logits(step.hidden)
            algo = self.algorithms[at]
            with self._blamed(at, "route()"):
                [dest] = destinations(self._clocks[at].call(algo.route, StepResult(at, [view], [step.token],
                                                                                   step.logits, step.hidden)),
                                      1, len(self.specs))
            with self._blamed(at, "keeps_token()"):
                settled = handoff.settle(algo, view, dest, step.token, stop)
            if settled.committed:
                stalled = 0
                per_model[at] += 1
                self._committed[at] += 1
                commits.append((time.perf_counter(), 1, self.model_names[at]))
                first_token = first_token or commits[-1][0]
            reason = settled.finish
            if settled.peer is not None:
                if stalled >= self.runtime.max_handoffs_per_token:  # a hand-off loop would never end
                    raise self._failure(at, handoff_loop(stalled))
                stalled += 1
                try:
                    views[dest], _ = handoff.deliver(algo, self.algorithms[dest], view, views[dest])  # no KV here
                except handoff.PluginCallFailed as failed:
                    raise self._failure(failed.model, call_failure(failed.call, failed.cause)) from None
                handoffs += 1
                self._handoffs[at] += 1
                at = dest
            t2 = time.perf_counter()
            self._timing[src].add(t2 - t0, step.http_s, step.server_s, t2 - t1)
        done = views[at]
        assert done is not None
        return GenerationResult(
            index=req.index, prompt_ids=list(req.prompt_ids), output_ids=list(done.output_ids), finish_reason=reason,
            tokens_per_model=dict(zip(self.model_names, per_model, strict=True)), handoffs=handoffs,
            arrival_s=arrival, first_token_s=first_token, finish_s=time.perf_counter(), commits=commits,
        )

    @contextlib.contextmanager
    def _blamed(self, model: int, call: str) -> Iterator[None]:
        """A plugin call on `model`'s side: what it raises fails this request alone, blaming the algorithm."""
        try:
            yield
        except RouteOverBudget:
            raise self._failure(model, self._clocks[model].overrun) from None
        except Exception as exc:
            raise self._failure(model, call_failure(call, exc)) from None

    def _failure(self, model: int, what: str) -> AlgorithmFailure:
        return AlgorithmFailure(algorithm_error(self.algorithms[model].name, self.model_names[model], what))

    async def _one_token(self, model: int, view: RouterRequest, stop: set[int]) -> _Step:
        """POST the whole prefix to `model`'s server for one token (and what route() needs)."""
        assert self._client is not None
        # min_tokens: while the request is short of them, this one token may not be a stop token
        body = generate_body(view.tokens, view.sampling, 1, stop, int(view.position < view.min_new_tokens))
        if self.ask_logits:
            body["return_logits"] = True
        if self.ask_hidden:
            body["return_hidden_states"] = True
        t0 = time.perf_counter()
        resp = await self._client.post(f"{self.servers[model].url}/generate", json=body)
        if resp.status_code != 200:
            raise server_error(self.model_names[model], resp, "std_serving: ")
        out = resp.json()
        http_s = time.perf_counter() - t0
        meta = out.get("meta_info") or {}
        return _Step(
            token=int(out["output_ids"][-1]),
            logits=_last_row(meta.get("logits")) if self.ask_logits else None,
            hidden=_last_row(meta.get("hidden_states")) if self.ask_hidden else None,
            http_s=http_s,
            server_s=float(meta.get("e2e_latency") or 0.0),
        )

    # ---- statistics ----------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Per model: dispatcher steps, tokens, hand-offs, and the per-token cost breakdown in ms (means per
        dispatcher step) next to the server's model step time (its engine's busy time per step)."""
        models: dict[str, Any] = {}
        for i, name in enumerate(self.model_names):
            t = self._timing[i]
            server = self._server_stats(i)
            models[name] = StdServingModelStats(t.steps, self._committed[i], self._handoffs[i],
                                                _breakdown(t, server), server).to_dict()
        return {"system": "std_serving", "server": self.opts.server, "prefix_cache_tokens":
                self.opts.prefix_cache_tokens, "models": models}

    def reset_stats(self) -> None:
        """Measure afresh from here (e.g. after a warm-up): dispatcher counters to zero, the servers'
        cumulative counters kept as a baseline that stats() subtracts."""
        n = len(self.specs)
        self._timing = [_Timing() for _ in range(n)]
        self._committed, self._handoffs = [0] * n, [0] * n
        self._baseline = [self._server_stats(i, since_reset=False) for i in range(n)]

    def _server_stats(self, i: int, since_reset: bool = True) -> dict[str, float] | None:
        """Forward steps and busy time of server `i`, read from its /metrics (for SGLang: forward passes, its
        run_batch stage, and every scheduler stage's seconds)."""
        if i >= len(self.servers):
            return None
        base = self._baseline[i] if since_reset else None
        if self.servers[i].kind == "sglang":
            stages = sglang_stage_stats(self.servers[i], base)
            if stages is None:
                return None
            return {"engine_steps": stages["forward_passes"], "busy_s": stages.get("stage_run_batch", 0.0), **stages}
        try:
            text = httpx.get(f"{self.servers[i].url}/metrics", timeout=5.0).text
        except httpx.HTTPError:
            return None
        values = {key: float(v) for key, v in re.findall(r'^tokenrouter_model_(\w+)\{model="[^"]*"\} (\S+)$', text, re.M)}
        if "steps" not in values:
            return None
        out = {"engine_steps": values["steps"], "busy_s": values.get("busy_s", 0.0)}
        return {k: v - base[k] for k, v in out.items()} if base else out


def _breakdown(t: _Timing, server: dict[str, float] | None) -> dict[str, float] | None:
    if not t.steps:
        return None
    ms = 1000.0 / t.steps
    out = {
        "dispatch": t.dispatch_s * ms,
        "http_round_trip": t.http_s * ms,
        "server_handling": t.server_s * ms,
        "client_http_json": (t.http_s - t.server_s) * ms,
        "dispatcher_routing": t.route_s * ms,
    }
    if server and server["engine_steps"]:
        per_step = 1000.0 / server["engine_steps"]
        step_ms = server["busy_s"] * per_step
        out["model_step"] = step_ms
        out["server_bookkeeping"] = out["server_handling"] - step_ms
        out["model_step_share"] = step_ms / out["dispatch"] if out["dispatch"] else 0.0
        stages = {k.removeprefix("stage_"): v * per_step for k, v in server.items()
                  if k.startswith("stage_") and k not in ("stage_idle", "stage_run_batch")}
        if stages:  # SGLang: its scheduler's own stage timers, ms per forward pass
            out.update({f"sglang_{k}": v for k, v in stages.items()})
            out["sglang_scheduler"] = sum(stages.values())
            # what the scheduler loop does not account for: tokenizer manager, detokenizer, their ZMQ IPC, queueing
            out["sglang_tokenizer_ipc"] = out["server_bookkeeping"] - out["sglang_scheduler"]
    return out


def _safetensor(source: str, name: str) -> torch.Tensor | None:
    """One tensor of a local safetensors checkpoint, or None (not local, not safetensors, not there)."""
    from safetensors import safe_open

    from tokenrouter.engine.loader import resolve_source

    src = resolve_source(source)
    if not src.is_local or src.gguf_file:
        return None
    for path in sorted(Path(src.location).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            if name in f.keys():  # noqa: SIM118 - safe_open has keys(), not __contains__
                return f.get_tensor(name)
    return None


def _last_row(values: Any) -> torch.Tensor | None:
    """[1, D] float tensor from a JSON vector (ours) or a list of per-position vectors (SGLang's)."""
    if not values:
        return None
    while isinstance(values[0], list):
        values = values[-1]
    return torch.tensor([values], dtype=torch.float32)


def from_setup(setup: SystemSetup) -> StdServingSystem:
    known = {f for f in StdServingOptions.__dataclass_fields__}
    setup.unknown_fields(known)
    opts = StdServingOptions(**{k: v for k, v in setup.system.items() if k in known})
    return StdServingSystem(setup.models, setup.algorithm, setup.runtime, setup.seed, opts)
