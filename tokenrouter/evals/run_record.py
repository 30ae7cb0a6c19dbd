"""What a run dir's summary.json is: its metrics AND the resolved config that produced them, in one file.

Hydra rewrites a point's `.hydra/config.yaml` whenever a sweep or run is launched at it, before any lock is
taken, so a label read from there can belong to another run. summary.json is written once, atomically, by the
run that measured it, and carries its own config and that config's hash: resume compares the hash with the
config it was asked to run, and reports and results.csv label every row from it. A summary counts as a result
only when it validates (`problem` is None): a truncated, foreign, empty or tampered one is reported and skipped
by reports, and rerun by a sweep.

The record's one definition is `RunRecord` below (msgspec Structs): every top-level key with its type, its
default and its meaning (`Annotated[type, doc("meaning", when=...)]`). The runner builds one (`build`) and
`write_summary` encodes it; `validate` converts a loaded summary into it, so its type and range checks are the
fields' own; docs/gen_reference.py prints it as the results reference. A key the record does not declare is
kept in `extras` (what a system's `summary_extra` adds beyond the declared ones) and written back at the top
level, so the file stays a flat JSON object. Every field but the six required ones may be absent (a summary
of an older version, or a condition given in `when`), but one that is present must have its type.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType
from msgspec import inspect as mi

from tokenrouter.evals.machine import SOURCES
from tokenrouter.fsutil import atomic_write_text

SUMMARY_FILE = "summary.json"
SCHEMA_VERSION = 2  # 1: summaries without a config record (labelled from .hydra/config.yaml, untrustworthy)
# top-level config keys that say how to run a sweep, not what a run measures: changing them never makes a
# finished point stale
NOT_IDENTITY = ("resume", "objective")


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that decides what a run measures."""
    return {k: v for k, v in config.items() if k not in NOT_IDENTITY}


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the identity part of a resolved config, as canonical JSON (key order never matters)."""
    text = json.dumps(identity(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# ---- the record ---------------------------------------------------------------------------------------------


def doc(meaning: str, when: str | None = None) -> Meta:
    """A field's meaning, and for a field written only in some runs, when it is (read back by `field_docs`)."""
    return Meta(description=meaning, extra={"when": when} if when else None)


def _number(**bounds: float) -> Any:
    """A JSON number within `bounds` (msgspec.Meta's ge/gt/le/lt), kept an int where it is one."""
    return Annotated[int, Meta(**bounds)] | Annotated[float, Meta(**bounds)]


Number = int | float
NonNegative = _number(ge=0)
Positive = _number(gt=0)
Share = _number(ge=0, le=1)
Count = Annotated[int, Meta(ge=0)]
# a config value echoed as the config gives it (Hydra reads `experiment_name=2024` as a number)
Scalar = str | int | float | bool | None
# runtime.thresholds as configured, or as resolved: "auto", [B_1, ..., B_m], per-N lists, or null
Thresholds = str | list[Count | list[Any] | None] | None

GRADED = "graded workloads (every request has a gold answer and a text output)"
SLO = "slo.ttft_ms / tpot_ms / e2el_ms set"
SERVING = " (bench_serving's name and unit)"  # SGLang's bench_serving, `vllm bench serve`


class StepTimes(Struct, kw_only=True):
    """One model's engine steps during the measured part, against the time expected for them."""

    measured: Annotated[NonNegative, doc("mean engine step, ms (busy time / steps)")]
    mean_batch: Annotated[NonNegative, doc("its mean batch size")]
    expected: Annotated[NonNegative | None, doc("the step time expected at that batch size, ms (null: nothing to "
                                                "expect it from)")]
    source: Annotated[Literal[SOURCES] | None, doc("where the expectation comes from: the model's start-up "
                                                   "latency profile, its latency_profile file, its sim step times "
                                                   "or the committed reference (results/demo)")]
    ratio: Annotated[NonNegative | None, doc("measured / expected")]


class Machine(Struct, kw_only=True):
    """The machine's state while the run was measured (tokenrouter/evals/machine.py)."""

    cores: Annotated[Annotated[int, Meta(ge=1)], doc("CPUs this process may run on")]
    load_before: Annotated[NonNegative | None, doc(
        "1-minute load average as the measured part started (it counts this run's own processes, and in a "
        "sweep the previous run's)")]
    load_after: Annotated[NonNegative | None, doc("the same as it ended")]
    others_cpu_share: Annotated[Share | None, doc(
        "share of the machine's CPU time used by processes other than this run's while it was measured "
        "(Linux /proc; null elsewhere)")]
    steal_share: Annotated[Share | None, doc(
        "share of the CPU time the hypervisor gave to other guests (null where the kernel does not say)")]
    step_ms: Annotated[dict[str, StepTimes], doc("per model that stepped: its step times")] = {}


class Provenance(Struct, kw_only=True):
    """Where the result came from (tokenrouter/evals/provenance.py)."""

    date: Annotated[str, doc("when the summary was written (UTC, ISO 8601)")]
    git_commit: Annotated[str | None, doc("the checkout's commit (null: not a git checkout)")]
    git_dirty: Annotated[bool | None, doc("whether tracked files differed from that commit")]
    packages: Annotated[dict[str, str], doc("versions of tokenrouter, torch, transformers, sglang, ... installed")]
    python: Annotated[str, doc("the Python version")]
    devices: Annotated[dict[str, str], doc("each device the models asked for, by name")]
    host: Annotated[str, doc("the host name")]
    event_loop: Annotated[str, doc("the front end's event loop (uvloop or asyncio)")]
    command: Annotated[list[str], doc("the command line that made the run")]


class ModelFit(Struct, kw_only=True):
    """One model's run lengths against the geometric the throughput model assumes (perfmodel/validity.py)."""

    model: Annotated[str, doc("the model")]
    runs: Annotated[int, doc("complete (uncensored) runs: consecutive output tokens it committed")]
    mean_run: Annotated[Number, doc("their mean length")]
    dispersion: Annotated[Number | None, doc("var / (mean (mean - 1)): 1 for geometric (null: every run has "
                                             "length 1)")]
    chi2: Annotated[Number, doc("chi-square of the geometric fit")]
    dof: Annotated[int, doc("its degrees of freedom")]
    p_value: Annotated[Number | None, doc("its p-value")]
    window_rates: Annotated[list[Number], doc("leave rate 1 / mean run per window of requests (finish order)")]
    drift: Annotated[Number | None, doc("(max - min) window rate x mean run")]
    in_regime: Annotated[bool | None, doc("dispersion and drift within bounds (null: too few runs to tell)")]


class ModelValidity(Struct, kw_only=True):
    """The throughput model's assumptions checked on the run's routing traces (perfmodel/validity.py)."""

    in_regime: Annotated[bool | None, doc("every model with a verdict is in the model's regime")]
    models: Annotated[list[ModelFit], doc("per model of the system, in order")]
    dispersion_bounds: Annotated[list[Number], doc("the dispersion a model in regime stays within")]
    max_drift: Annotated[Number, doc("the drift a model in regime stays below")]


class TraceModel(Struct, kw_only=True):
    """One model's batches in trace.json (a model that stepped no batch has `batches` only)."""

    batches: Annotated[Count, doc("batches this model stepped")]
    busy_fraction: Annotated[Number | None | UnsetType, doc("its batches' time / the window")] = UNSET
    busy_s: Annotated[Number | UnsetType, doc("its batches' time")] = UNSET
    idle_gaps: Annotated[Count | UnsetType, doc("gaps between its consecutive batches")] = UNSET
    idle_gap_p50_ms: Annotated[Number | None | UnsetType, doc("their median")] = UNSET
    idle_gap_p99_ms: Annotated[Number | None | UnsetType, doc("their p99")] = UNSET
    idle_s: Annotated[Number | UnsetType, doc("their sum")] = UNSET
    mean_batch_size: Annotated[Number | UnsetType, doc("requests per batch")] = UNSET
    forced_by_max_wait: Annotated[Count | UnsetType, doc("batches launched below the threshold by max-wait")] = UNSET
    wait_busy_s: Annotated[Number | UnsetType, doc("time requests were ready on it while it stepped another "
                                                   "batch")] = UNSET
    wait_idle_s: Annotated[Number | UnsetType, doc("time requests were ready on it while it was idle (a "
                                                   "threshold; lock-step: the other model)")] = UNSET
    wait_per_request_step_ms: Annotated[Number | None | UnsetType, doc("both waits per request-step")] = UNSET


class Trace(Struct, kw_only=True):
    """The figures of trace.json (tokenrouter/trace/summary.py; `tokenrouter trace summarize` prints them)."""

    window_s: Annotated[Number, doc("the run's first event to its last (the same window for every model)")]
    requests: Annotated[Count, doc("requests in the trace")]
    handoffs: Annotated[Count, doc("hand-offs over all requests")]
    flows: Annotated[Count, doc("hand-offs drawn as flow events (systems whose batches name their requests)")]
    batches: Annotated[Count, doc("batches in the trace")]
    capped: Annotated[list[str], doc("models that reached runtime.trace_max_batches")]
    models: Annotated[dict[str, TraceModel], doc("per model: its batches' figures")]


class RouteLLM(Struct, kw_only=True):
    """RouteLLM's measures of the query-level router's scores (baselines/query_routing.py `routellm_metrics`)."""

    weak_accuracy: Annotated[Number, doc("accuracy of the weak-only run on this workload")]
    strong_accuracy: Annotated[Number, doc("accuracy of the strong-only run")]
    apgr: Annotated[Number, doc("average performance gap recovered over the router's threshold sweep (NaN: "
                                "no gap)")]
    cpt50: Annotated[Number, doc("the strong share that recovers 50% of the gap (NaN: no gap)")]


class OfficialR2R(Struct, kw_only=True):
    """Which official R2R code and server ran (baselines/official_r2r.py `RunInfo`)."""

    commit: Annotated[str, doc("the R2R checkout's commit")]
    pinned_commit: Annotated[str, doc("the commit this harness was checked against")]
    server: Annotated[str, doc("the server script that ran")]
    router: Annotated[str, doc("the router checkpoint it loaded")]
    threshold: Annotated[Number, doc("the router's threshold")]
    overlap_tp_schedule: Annotated[bool, doc("R2R's --overlap-tp-schedule")]
    cuda_visible_devices: Annotated[str, doc("the GPUs it was given")]
    random_routing: Annotated[bool, doc("R2R's known issue: its router routed at random")]
    device: Annotated[str, doc("cuda, or cpu: run with our CPU adaptations (official_r2r_cpu/)")] = "cuda"


class OfficialEnsemble(Struct, kw_only=True):
    """Which official mixture-ensemble code ran, and how (baselines/official_ensemble.py `RunInfo`)."""

    commit: Annotated[str, doc("the official checkout's commit")]
    repo: Annotated[str, doc("where it is")]
    python: Annotated[str, doc("the interpreter of its environment")]
    method: Annotated[str, doc("the ensemble method")]
    weights: Annotated[list[Number], doc("the members' weights")]
    actors: Annotated[str, doc("how its actors were placed")]
    draws: Annotated[str, doc("how tokens were drawn")]
    reseed: Annotated[str, doc("how draws were reseeded")]
    ready: Annotated[dict[str, Any], doc("the worker's ready line: versions, tokenizer, actors")] = {}


class RunRecord(Struct, kw_only=True):
    """summary.json: one run's figures, labels, the machine's state, provenance and the resolved config.

    Fields are in the order the file holds them; `extras` stands for the undeclared keys at its place."""

    # -- the run's figures (tokenrouter/evals/metrics.py summarize)
    model_names: Annotated[list[str], doc("the system's model names, entry model first")]
    num_requests: Annotated[Count, doc("requests run")]
    errors: Annotated[Count | UnsetType, doc("requests that failed (recorded in requests.jsonl)")] = UNSET
    elapsed_s: Annotated[NonNegative | UnsetType, doc("wall time of the measured part")] = UNSET
    output_tokens: Annotated[Count | UnsetType, doc("output tokens of all requests")] = UNSET
    prompt_tokens: Annotated[Count | UnsetType, doc("prompt tokens of all requests")] = UNSET
    throughput_tok_s: Annotated[NonNegative | None, doc("output tokens / elapsed (the paper's decoding "
                                                        "throughput)")]
    mean_in_flight: Annotated[NonNegative | None | UnsetType, doc(
        "time-averaged requests in flight (Little's law): N for a busy closed loop")] = UNSET
    per_request_throughput_tok_s: Annotated[NonNegative | None | UnsetType, doc(
        "mean over requests of output tokens / latency (the Pareto study's axis)")] = UNSET
    mean_output_tokens: Annotated[NonNegative | None | UnsetType, doc("mean output length")] = UNSET
    mean_latency_s: Annotated[NonNegative | None | UnsetType, doc("mean end-to-end latency")] = UNSET
    p50_latency_s: Annotated[NonNegative | None | UnsetType, doc("median latency")] = UNSET
    p99_latency_s: Annotated[NonNegative | None | UnsetType, doc("p99 latency")] = UNSET
    mean_ttft_s: Annotated[NonNegative | None | UnsetType, doc("mean time to first token")] = UNSET
    p99_ttft_s: Annotated[NonNegative | None | UnsetType, doc("p99 time to first token")] = UNSET
    tokens_per_model: Annotated[dict[str, Count] | UnsetType, doc("output tokens each model committed")] = UNSET
    token_share: Annotated[dict[str, Share | None] | UnsetType, doc("each model's share of them")] = UNSET
    large_token_share: Annotated[Share | None | UnsetType, doc(
        "the model set's last (strong) model's share, also when the system serves part of the set")] = UNSET
    handoffs_per_request: Annotated[NonNegative | None | UnsetType, doc("mean hand-offs per request")] = UNSET
    router_calls_per_request: Annotated[NonNegative | None | UnsetType, doc("mean route() calls per "
                                                                            "request")] = UNSET
    finish_reasons: Annotated[dict[str, Count] | UnsetType, doc("requests per finish reason")] = UNSET
    num_graded: Annotated[Count | UnsetType, doc("requests graded", GRADED)] = UNSET
    num_correct: Annotated[Count | UnsetType, doc("of them correct", GRADED)] = UNSET
    accuracy: Annotated[Share | None | UnsetType, doc("num_correct / num_graded", GRADED)] = UNSET
    accuracy_ci95_low: Annotated[Share | None | UnsetType, doc("its 95% Wilson interval's low end",
                                                               GRADED)] = UNSET
    accuracy_ci95_high: Annotated[Share | None | UnsetType, doc("its high end", GRADED)] = UNSET
    steady_throughput_tok_s: Annotated[NonNegative | None | UnsetType, doc(
        "closed loop: output tokens per second from the first arrival to the last (no drain tail; what the "
        "throughput model predicts); null in one wave or open loop")] = UNSET
    # -- the serving figures under bench_serving's names (metrics.py serving_metrics), of completed requests
    duration: Annotated[NonNegative | UnsetType, doc("seconds the requests ran" + SERVING)] = UNSET
    completed: Annotated[Count | UnsetType, doc("requests completed" + SERVING)] = UNSET
    failed: Annotated[Count | UnsetType, doc("requests failed" + SERVING)] = UNSET
    total_input_tokens: Annotated[Count | UnsetType, doc("prompt tokens of completed requests" + SERVING)] = UNSET
    total_output_tokens: Annotated[Count | UnsetType, doc("output tokens of completed requests" + SERVING)] = UNSET
    request_throughput: Annotated[NonNegative | None | UnsetType, doc("completed requests per second"
                                                                      + SERVING)] = UNSET
    input_throughput: Annotated[NonNegative | None | UnsetType, doc("prompt tokens per second" + SERVING)] = UNSET
    output_throughput: Annotated[NonNegative | None | UnsetType, doc("output tokens per second"
                                                                     + SERVING)] = UNSET
    total_token_throughput: Annotated[NonNegative | None | UnsetType, doc("prompt and output tokens per second"
                                                                          + SERVING)] = UNSET
    mean_ttft_ms: Annotated[NonNegative | None | UnsetType, doc("mean time to first token" + SERVING)] = UNSET
    median_ttft_ms: Annotated[NonNegative | None | UnsetType, doc("median time to first token" + SERVING)] = UNSET
    std_ttft_ms: Annotated[NonNegative | None | UnsetType, doc("its standard deviation" + SERVING)] = UNSET
    p90_ttft_ms: Annotated[NonNegative | None | UnsetType, doc("its p90" + SERVING)] = UNSET
    p99_ttft_ms: Annotated[NonNegative | None | UnsetType, doc("its p99" + SERVING)] = UNSET
    mean_tpot_ms: Annotated[NonNegative | None | UnsetType, doc(
        "mean time per output token after the first: (e2e - TTFT) / (tokens - 1)" + SERVING)] = UNSET
    median_tpot_ms: Annotated[NonNegative | None | UnsetType, doc("median time per output token" + SERVING)] = UNSET
    std_tpot_ms: Annotated[NonNegative | None | UnsetType, doc("its standard deviation" + SERVING)] = UNSET
    p90_tpot_ms: Annotated[NonNegative | None | UnsetType, doc("its p90" + SERVING)] = UNSET
    p99_tpot_ms: Annotated[NonNegative | None | UnsetType, doc("its p99" + SERVING)] = UNSET
    mean_itl_ms: Annotated[NonNegative | None | UnsetType, doc(
        "mean inter-token latency, per output token (a commit of k tokens is k equal gaps; null: the system "
        "records no commit times)" + SERVING)] = UNSET
    median_itl_ms: Annotated[NonNegative | None | UnsetType, doc("median inter-token latency" + SERVING)] = UNSET
    std_itl_ms: Annotated[NonNegative | None | UnsetType, doc("its standard deviation" + SERVING)] = UNSET
    p90_itl_ms: Annotated[NonNegative | None | UnsetType, doc("its p90" + SERVING)] = UNSET
    p99_itl_ms: Annotated[NonNegative | None | UnsetType, doc("its p99" + SERVING)] = UNSET
    mean_e2el_ms: Annotated[NonNegative | None | UnsetType, doc("mean end-to-end latency" + SERVING)] = UNSET
    median_e2el_ms: Annotated[NonNegative | None | UnsetType, doc("median end-to-end latency" + SERVING)] = UNSET
    std_e2el_ms: Annotated[NonNegative | None | UnsetType, doc("its standard deviation" + SERVING)] = UNSET
    p90_e2el_ms: Annotated[NonNegative | None | UnsetType, doc("its p90" + SERVING)] = UNSET
    p99_e2el_ms: Annotated[NonNegative | None | UnsetType, doc("its p99" + SERVING)] = UNSET
    goodput_slos_ms: Annotated[dict[str, Positive] | UnsetType, doc(
        "the SLO per metric (ttft, tpot, e2el), ms", SLO)] = UNSET
    request_goodput: Annotated[NonNegative | None | UnsetType, doc(
        "completed requests meeting every SLO, per second (bench_serving's --goodput)", SLO)] = UNSET
    slo_attainment: Annotated[Share | None | UnsetType, doc("the share of requests meeting every SLO",
                                                            SLO)] = UNSET
    # -- what identifies the run (bench.py run_info); each label equals its config's value
    experiment: Annotated[Scalar | UnsetType, doc("`experiment_name` of the experiment config, if any")] = UNSET
    system: Annotated[str | UnsetType, doc("the serving system (`system.name`)")] = UNSET
    model_set: Annotated[Scalar | UnsetType, doc("the `models` set's name")] = UNSET
    tp: Annotated[str | UnsetType, doc("tensor-parallel size per member, e.g. `1/2`")] = UNSET
    algorithm: Annotated[dict[str, Any] | str | None | UnsetType, doc("the algorithm config as run")] = UNSET
    workload: Annotated[str | UnsetType, doc("the workload's name")] = UNSET
    arrival: Annotated[str | UnsetType, doc("closed_loop / all_at_once / poisson")] = UNSET
    request_rate: Annotated[Positive | None | UnsetType, doc("poisson: requests per second, else null")] = UNSET
    concurrency: Annotated[Annotated[int, Meta(ge=1)] | UnsetType, doc(
        "closed-loop clients N (open loop: the number of requests, the most that can be in flight)")] = UNSET
    seed: Annotated[int | UnsetType, doc("the run seed (routing and sampling seeds derive from it per "
                                         "request)")] = UNSET
    delayed_batching: Annotated[bool | UnsetType, doc("runtime.delayed_batching")] = UNSET
    thresholds_spec: Annotated[Thresholds | UnsetType, doc("runtime.thresholds as configured")] = UNSET
    thresholds: Annotated[Thresholds | UnsetType, doc(
        "the thresholds B_i(N) used at the run's N (null: the system has none, e.g. lock-step; open loop: they "
        "follow the live count)")] = UNSET
    warmup_requests: Annotated[Count | UnsetType, doc("untimed requests run first (not in these figures)")] = UNSET
    stats: Annotated[dict[str, Any] | UnsetType, doc(
        "the system's own counters (per model: steps, batch sizes, waits, hand-offs; stats.py)")] = UNSET
    # -- what systems add (ServingSystem.summary_extra)
    routellm: Annotated[RouteLLM | UnsetType, doc(
        "RouteLLM's measures of the router", "system=query_routing given weak_run and strong_run")] = UNSET
    official_r2r: Annotated[OfficialR2R | UnsetType, doc("the official R2R run", "system=official_r2r")] = UNSET
    official_ensemble: Annotated[OfficialEnsemble | UnsetType, doc(
        "the official ensemble run", "system=official_ensemble")] = UNSET
    extras: Annotated[dict[str, Any], doc(
        "keys a system's summary_extra adds that this record does not declare, each written as a top-level key "
        "here")] = {}
    # -- the model, the machine, where the result came from
    predicted_throughput_tok_s: Annotated[NonNegative | None | UnsetType, doc(
        "the throughput model's prediction (closed loop, sim engines, fixed-rate algorithms), else null")] = UNSET
    model_validity: Annotated[ModelValidity | None | UnsetType, doc(
        "the throughput model's assumptions checked on the run's routing traces (null: no routing traces)")] = UNSET
    machine: Annotated[Machine | UnsetType, doc(
        "the machine's state while the run was measured: whether its timings can be compared")] = UNSET
    provenance: Annotated[Provenance | UnsetType, doc(
        "date, git commit and dirty flag, package versions, devices, host, the command typed")] = UNSET
    trace: Annotated[Trace | UnsetType, doc("the trace's figures (trace.json, samples.json in the run dir)",
                                            "runtime.trace=true")] = UNSET
    sweeper: Annotated[str | None | UnsetType, doc(
        "the Hydra sweeper that made the run (basic: a grid; e.g. optuna_pareto: a search), null for a single "
        "run")] = UNSET
    # -- the config record
    schema_version: Annotated[int, doc(f"{SCHEMA_VERSION}: the summary carries its config record")]
    config: Annotated[dict[str, Any], doc(
        "the resolved config that produced these figures (the record every label is read from)")]
    config_hash: Annotated[str, doc(
        "sha256 of the config's identity keys (all but `resume`, `objective`): what resume compares")]


EXTRAS = "extras"
DECLARED = frozenset(RunRecord.__struct_fields__) - {EXTRAS}  # keys summary.json holds as fields
REQUIRED = tuple(f.name for f in msgspec.structs.fields(RunRecord) if f.required)
CONFIG_RECORD = ("schema_version", "config", "config_hash")
_Required = msgspec.defstruct("_Required", [(f.name, f.type) for f in msgspec.structs.fields(RunRecord)
                                             if f.required], kw_only=True, module=__name__)


def decode(summary: Mapping[str, Any]) -> RunRecord:
    """A loaded summary.json (a JSON object) as a RunRecord; msgspec.ValidationError where a field is not
    of its type (undeclared keys go to `extras`)."""
    known = {k: v for k, v in summary.items() if k in DECLARED}
    extras = {k: v for k, v in summary.items() if k not in DECLARED}
    return msgspec.convert({**known, EXTRAS: extras}, RunRecord, strict=True)


def encode(record: RunRecord) -> dict[str, Any]:
    """The record as summary.json's object: fields in order, absent ones left out, `extras` spread in place."""
    out: dict[str, Any] = {}
    for name in record.__struct_fields__:
        value = getattr(record, name)
        if name == EXTRAS:
            out.update(value)
        elif value is not UNSET:
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    """Structs as dicts (absent fields left out), all else as it is (json.dumps writes it as before)."""
    if isinstance(value, Struct):
        return {f: _plain(v) for f in value.__struct_fields__ if (v := getattr(value, f)) is not UNSET}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def build(fields: Mapping[str, Any], config: dict[str, Any]) -> RunRecord:
    """The record of a run: its figures and labels (`fields`, summary.json's keys) with the config record.
    A field of the wrong type, or a key inside a nested part that the record does not declare (it would be
    dropped), is a bug of the runner: ValueError naming it."""
    data = _floats({**fields, "schema_version": SCHEMA_VERSION, "config": config, "config_hash": config_hash(config)})
    try:
        record = decode(data)
    except msgspec.ValidationError as exc:
        raise ValueError(f"summary.json: {exc}") from None
    lost = _lost(data, encode(record))
    if lost:
        raise ValueError(f"summary.json: {lost} is not declared in the run record (tokenrouter/evals/run_record.py)")
    return record


def _floats(value: Any) -> Any:
    """`value` with float subclasses (numpy's float64) as floats: msgspec takes exact types; json writes both
    the same."""
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_floats(v) for v in value]  # json writes a tuple as a list too
    return float(value) if isinstance(value, float) and type(value) is not float else value


def _lost(given: Any, kept: Any, path: str = "") -> str | None:
    """The first key of `given` that `kept` lacks, by its dotted path."""
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            if key not in kept:
                return path + str(key)
            found = _lost(value, kept[key], f"{path}{key}.")
            if found:
                return found
    elif isinstance(given, list | tuple) and isinstance(kept, list):
        for i, (a, b) in enumerate(zip(given, kept, strict=False)):
            found = _lost(a, b, f"{path}{i}.")
            if found:
                return found
    return None


def write_summary(run_dir: Path, record: RunRecord) -> dict[str, Any]:
    """summary.json = the record, written atomically; returns what was written."""
    data = encode(record)
    atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(data, indent=2, default=str) + "\n")
    return data


# ---- validation ---------------------------------------------------------------------------------------------


def validate(summary: Any) -> str | None:
    """Why `summary` (parsed JSON) is not a result this version can trust, or None when it is: the required
    keys, the schema version, the config hash, the labels the config gives, then every field's type and
    range from RunRecord (a constrained number must also be finite)."""
    if not isinstance(summary, dict):
        return f"not a JSON object (got {type(summary).__name__})"
    for key in (*CONFIG_RECORD, *REQUIRED):
        if key not in summary:
            if key in CONFIG_RECORD:
                return f"no config record ({key!r} missing: written by an older tokenrouter, or not by bench)"
            return f"{key!r} missing"
    try:
        msgspec.convert({k: summary[k] for k in REQUIRED}, _Required, strict=True)
    except msgspec.ValidationError as exc:
        return _type_problem(summary, str(exc))
    if summary["schema_version"] != SCHEMA_VERSION:
        return f"schema_version {summary['schema_version']} (this version reads {SCHEMA_VERSION})"
    if config_hash(summary["config"]) != summary["config_hash"]:
        return "its config does not match its config_hash (edited or damaged)"
    problem = _labels_problem(summary)
    if problem:
        return problem
    try:
        record = decode(summary)
    except msgspec.ValidationError as exc:
        return _type_problem(summary, str(exc))
    return _not_finite(summary, record) or _extras_problem(record.extras)


def _config_labels(config: dict[str, Any]) -> dict[str, Any]:
    """The summary's labels as its (hashed) config says they must be."""
    def node(key: str) -> dict[str, Any]:
        value = config.get(key)
        return value if isinstance(value, dict) else {}

    return {"system": node("system").get("name"), "model_set": node("models").get("name"),
            "algorithm": config.get("algorithm"), "experiment": config.get("experiment_name"),
            "arrival": config.get("arrival", "closed_loop")}


def _labels_problem(summary: dict[str, Any]) -> str | None:
    """A label that reports group by must be the one the hashed config gives (the config is what was run)."""
    for key, expected in _config_labels(summary["config"]).items():
        if key in summary and summary[key] != expected:
            return f"{key!r} is {_show(summary[key])} but its config says {_show(expected)}"
    return None


_AT = re.compile(r"(?P<what>.*) - at `\$\.(?P<key>[^.\[`]+)(?P<rest>[^`]*)`", re.S)


def _type_problem(summary: dict[str, Any], error: str) -> str:
    """A msgspec validation error as `'key' is <value>, expected <its type in words>` (where inside a nested
    part it failed, in brackets)."""
    m = _AT.fullmatch(error)
    if m is None or m.group("key") not in summary:
        return f"not a run record ({error})"
    key = m.group("key")
    text = f"{key!r} is {_show(summary[key])}, expected {describe(_field_types()[key])}"
    if m.group("rest") or not m.group("what").startswith("Expected"):  # inside it, or a key missing there
        text += f" ({m.group('what')} at {key}{m.group('rest')})"
    return text


def _not_finite(summary: dict[str, Any], record: RunRecord) -> str | None:
    """A NaN or infinity where a field asks for a number within bounds (msgspec compares, never rejects them)."""
    types = _field_types()
    for key in RunRecord.__struct_fields__:
        value = getattr(record, key)
        if key != EXTRAS and value is not UNSET:
            where = _non_finite(value, types[key], key)
            if where is not None:
                text = f"{key!r} is {_show(summary[key])}, expected {describe(types[key])}"
                return text + (f" (not finite at {where})" if where != key else "")
    return None


def _non_finite(value: Any, t: Any, path: str) -> str | None:
    """Where under `value` (of msgspec.inspect type `t`) a number with bounds is NaN or infinite, else None."""
    t = _unwrap(t)
    if isinstance(t, mi.UnionType):
        members = [_unwrap(m) for m in t.types]
        kinds = ((float, mi.FloatType), (Struct, mi.StructType), (dict, mi.DictType), (list, mi.ListType))
        t = next((m for py, kind in kinds if isinstance(value, py) for m in members if isinstance(m, kind)
                  and (kind is not mi.StructType or isinstance(value, m.cls))), None)
    if isinstance(t, mi.FloatType) and isinstance(value, float) and not math.isfinite(value):
        return path if any(b is not None for b in (t.ge, t.gt, t.le, t.lt)) else None
    children: list[tuple[Any, Any, str]] = []
    if isinstance(t, mi.StructType):
        children = [(getattr(value, f.name), f.type, f"{path}.{f.name}") for f in t.fields]
    elif isinstance(t, mi.DictType) and isinstance(value, dict):
        children = [(v, t.value_type, f"{path}.{k}") for k, v in value.items()]
    elif isinstance(t, mi.ListType) and isinstance(value, list):
        children = [(v, t.item_type, f"{path}[{i}]") for i, v in enumerate(value)]
    for child, child_type, child_path in children:
        if child is not UNSET:
            where = _non_finite(child, child_type, child_path)
            if where is not None:
                return where
    return None


# a key the record does not declare, named like a measurement: a finite number >= 0, or null
MEASURED_SUFFIXES = ("_s", "_ms", "_tok_s", "_throughput", "_per_request")


def _extras_problem(extras: dict[str, Any]) -> str | None:
    for key, value in extras.items():
        if key.endswith(MEASURED_SUFFIXES) and not isinstance(value, dict | list) and not (
                value is None or (isinstance(value, int | float) and not isinstance(value, bool)
                                  and math.isfinite(value) and value >= 0)):
            return f"{key!r} is {_show(value)}, expected a number >= 0 or null"
    return None


# ---- the record in words (validation messages, the results reference) ---------------------------------------


_TYPES: dict[str, Any] = {}


def _field_types() -> dict[str, Any]:
    """RunRecord's field name -> msgspec.inspect type."""
    if not _TYPES:
        _TYPES.update({f.name: f.type for f in mi.type_info(RunRecord).fields})
    return _TYPES


def _unwrap(t: Any) -> Any:
    while isinstance(t, mi.Metadata):
        t = t.type
    return t


def _bounds(t: Any) -> str:
    if t.ge == 0 and t.le == 1 and isinstance(t, mi.FloatType):
        return " in [0, 1]"
    parts = [f" {op} {bound:g}" for op, bound in ((">=", t.ge), (">", t.gt), ("<=", t.le), ("<", t.lt))
             if bound is not None]
    return " and".join(parts)


def describe(t: Any) -> str:
    """A msgspec.inspect type in words: `an integer >= 1`, `a number >= 0 or null`, `a mapping of text to ...`."""
    t = _unwrap(t)
    if isinstance(t, mi.UnionType):
        members = [_unwrap(m) for m in t.types]
        numbers = [m for m in members if isinstance(m, mi.IntType | mi.FloatType)]
        words = []
        if len(numbers) == 2:  # int | float with the same bounds: a number
            float_type = next(m for m in numbers if isinstance(m, mi.FloatType))
            words.append(("a share" if _bounds(float_type) == " in [0, 1]" else "a number") + _bounds(float_type))
        words += [describe(m) for m in members if not isinstance(m, mi.NoneType) and not (
            len(numbers) == 2 and m in numbers)]
        if any(isinstance(m, mi.NoneType) for m in members):
            words.append("null")
        return " or ".join(words)
    if isinstance(t, mi.IntType):
        return "an integer" + _bounds(t)
    if isinstance(t, mi.FloatType):
        return ("a share" if _bounds(t) == " in [0, 1]" else "a number") + _bounds(t)
    if isinstance(t, mi.StrType):
        return "text"
    if isinstance(t, mi.BoolType):
        return "true or false"
    if isinstance(t, mi.NoneType):
        return "null"
    if isinstance(t, mi.AnyType):
        return "any value"
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(json.dumps(v) for v in t.values)
    if isinstance(t, mi.ListType):
        return f"a list of {_plural(describe(t.item_type))}"
    if isinstance(t, mi.DictType):
        return f"a mapping of {describe(t.key_type)} to {_group(describe(t.value_type))}"
    if isinstance(t, mi.StructType):
        return f"{'an' if t.cls.__name__[0] in 'AEIOU' else 'a'} {t.cls.__name__} record"
    return type(t).__name__


def _group(words: str) -> str:
    return f"({words})" if " or " in words else words


def _plural(words: str) -> str:
    """`a number` -> `numbers`, `an integer >= 0` -> `integers >= 0`, `a Machine record` -> `Machine records`."""
    if " or " in words or not words.startswith(("a ", "an ")):
        return _group(words)
    rest = words.split(" ", 1)[1]
    if rest.endswith(" record"):
        return rest + "s"
    first, _, tail = rest.partition(" ")
    return f"{first}s {tail}".rstrip()


@dataclass(frozen=True)
class FieldDoc:
    """One field of a record Struct, as the results reference shows it."""

    name: str
    type: str  # in words (`describe`)
    default: str  # "required", "absent" or the default's JSON
    when: str | None  # written only then (None: always)
    meaning: str


def field_docs(struct: type[Struct]) -> list[FieldDoc]:
    """Every field of `struct` (RunRecord or a part of it) with its type, default, condition and meaning."""
    out = []
    for f, info in zip(msgspec.structs.fields(struct), mi.type_info(struct).fields, strict=True):
        meta = info.type if isinstance(info.type, mi.Metadata) else None
        meaning = ((meta.extra_json_schema or {}).get("description", "") if meta else "")
        when = ((meta.extra or {}).get("when") if meta else None)
        if f.required:
            default = "required"
        elif f.default is UNSET:
            default = "absent"
        else:
            default = json.dumps(f.default if f.default is not msgspec.NODEFAULT else f.default_factory())
        out.append(FieldDoc(f.name, describe(info.type), default, when, meaning))
    return out


def nested_structs(struct: type[Struct] = RunRecord) -> list[type[Struct]]:
    """The Structs nested in `struct` (its fields' types, recursively), in field order."""
    found: list[type[Struct]] = []

    def walk(t: Any) -> None:
        t = _unwrap(t)
        if isinstance(t, mi.StructType):
            if t.cls not in found:
                found.append(t.cls)
                for f in t.fields:
                    walk(f.type)
        elif isinstance(t, mi.UnionType):
            for m in t.types:
                walk(m)
        elif isinstance(t, mi.ListType):
            walk(t.item_type)
        elif isinstance(t, mi.DictType):
            walk(t.value_type)

    walk(mi.type_info(struct))
    return found[1:]


# ---- reading ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredSummary:
    """A summary.json as read back: the parsed record, or why it cannot be used."""

    path: Path
    summary: dict[str, Any] | None
    problem: str | None

    @property
    def exists(self) -> bool:
        return self.summary is not None or self.problem != "missing"


def read_summary(run_dir: Path) -> StoredSummary:
    """summary.json of `run_dir`, validated; never raises for a damaged file (the problem says what is wrong)."""
    path = run_dir / SUMMARY_FILE
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return StoredSummary(path, None, "missing")
    except UnicodeDecodeError as exc:
        return StoredSummary(path, None, f"not UTF-8 (byte {exc.start})")
    except json.JSONDecodeError as exc:
        return StoredSummary(path, None, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    except OSError as exc:
        return StoredSummary(path, None, f"unreadable ({exc.strerror or exc})")
    problem = validate(data)
    return StoredSummary(path, data if problem is None else None, problem)


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {"a.b.c": value} (lists and scalars kept as they are)."""
    if not isinstance(data, dict) or (prefix and not data):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_differences(recorded: dict[str, Any], requested: dict[str, Any], shown: int = 4) -> str:
    """`workload.output_tokens: 100 -> 200, seed: 0 -> 1` for the identity keys that differ (at most `shown`,
    then how many more)."""
    old, new = flat(identity(recorded)), flat(identity(requested))
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k, _ABSENT) != new.get(k, _ABSENT))
    parts = [f"{k}: {_show(old.get(k, _ABSENT))} -> {_show(new.get(k, _ABSENT))}" for k in keys[:shown]]
    if len(keys) > shown:
        parts.append(f"and {len(keys) - shown} more")
    return ", ".join(parts)


_ABSENT = object()


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
