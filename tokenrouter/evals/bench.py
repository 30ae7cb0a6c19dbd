"""The experiment runner behind `tokenrouter bench`: one Hydra job = one run of one system on one workload.

A run dir (Hydra's output dir) receives, as the run goes, all of it written while the run holds the dir (an
flock, `tokenrouter.fsutil.locked_dir`: a second writer is refused instead of interleaving with this one):
- `.hydra/` (config, hydra, overrides) and `config.yaml` (resolved), for people and Hydra's tools;
- `requests.jsonl`: one line per finished request, written and flushed when it finishes, so a crash keeps
  everything finished so far (failed requests are recorded with their error, never dropped);
- `summary.json`: written last (atomically), only when the run completed, with the resolved config and its
  hash (`tokenrouter.evals.run_record`): the only record reports and resume trust. A sweep point whose summary validates
  and whose config hash equals the requested one is skipped, so rerunning a crashed sweep with the same
  `hydra.sweep.dir` only runs what is missing; a point holding another config's results is refused with the
  keys that differ (`resume=rerun` moves them to `<point>/.superseded/` and runs it again); a damaged summary
  is rerun, with a warning. A rerun point starts its requests.jsonl afresh.
A storage fault (disk full, read-only, no permission) ends the run with one line naming the path and the
errno (`StorageError`); in a sweep only that point fails.

Clients: `arrival=closed_loop` runs `concurrency` clients, each sending its next request when its last one
finished (the paper's serving setting); `arrival=all_at_once` sends every request at t=0 (its Pareto study);
`arrival=poisson` is open loop: requests arrive at `request_rate` per second with exponential gaps (seeded),
whatever is in flight, as online serving sees them.
A request that fails on its own (`UserError` from the system, or a result with finish_reason "error") is
recorded and the run goes on; any other exception means the system crashed: no new requests are sent, the
partial requests.jsonl is kept, and the run ends with one clear error (no summary, so a resume reruns it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from tokenrouter import event_loop
from tokenrouter.config import ModelSpec, model_specs, plain, seed_value
from tokenrouter.engine.base import SamplingParams
from tokenrouter.errors import StorageError, UserError
from tokenrouter.evals import machine, run_record
from tokenrouter.evals.metrics import SLO_METRICS
from tokenrouter.evals.preconditions import start_problems
from tokenrouter.evals.provenance import provenance
from tokenrouter.evals.systems import build_system
from tokenrouter.fsutil import atomic_write_text, locked_dir
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.heap import freeze_startup
from tokenrouter.runtime.thresholds import infeasible_note
from tokenrouter.system import ServingSystem

log = logging.getLogger(__name__)

REQUESTS_FILE = "requests.jsonl"
SUMMARY_FILE = run_record.SUMMARY_FILE
SUPERSEDED_DIR = ".superseded"  # resume=rerun moves a point's previous results here (reports skip dot dirs)
ARRIVALS = ("closed_loop", "all_at_once", "poisson")
RESUME_MODES = ("check", "rerun")


class RunFailed(RuntimeError):
    """The system crashed during a run; requests.jsonl holds what finished before."""


@dataclass
class Prepared:
    """The workload turned into requests for one system (prompt ids through the entry model's tokenizer)."""

    requests: list[GenerationRequest]
    answers: list[str | None]
    kinds: list[str]
    texts: list[str]  # prompt text (decoded, or the ids as text for weightless models)
    tokenizer: Any


def request_seed(seed: int, index: int) -> int:
    """The routing/sampling seed of request `index`: the same for every system, so their decisions match."""
    return seed * 1_000_003 + index


def prepare(cfg: Any, entry: ModelSpec, seed: int) -> tuple[str, Prepared]:
    """Load the workload and encode its prompts with `entry`'s tokenizer (none for weightless sim models);
    `seed` is the run's (synthetic prompts, option order, per-request seeds)."""
    from tokenrouter.evals.workloads import encode_problem, load_workload

    workload = load_workload(cfg.workload, seed=seed)
    tokenizer = None
    if entry.engine != "sim":
        from tokenrouter.engine.loader import load_tokenizer

        tokenizer = load_tokenizer(entry.source)
    try:
        sampling = SamplingParams(**(plain(cfg.get("sampling")) or {}))
    except TypeError as exc:
        raise UserError(f"sampling: {exc} (fields: temperature, top_p, top_k, seed)") from None
    requests, texts = [], []
    for p in workload.problems:
        ids = encode_problem(p, tokenizer)
        rseed = request_seed(seed, p.index)
        # sampled runs get a per-request sampling seed, so every system samples the same tokens
        per_request = sampling if sampling.greedy or sampling.seed is not None else replace(sampling, seed=rseed)
        requests.append(GenerationRequest(prompt_ids=ids, max_new_tokens=workload.max_new_tokens,
                                          sampling=per_request, seed=rseed, index=p.index))
        texts.append(tokenizer.decode(ids, skip_special_tokens=True) if tokenizer else " ".join(map(str, ids)))
    answers = [p.answer for p in workload.problems]
    kinds = [p.kind for p in workload.problems]
    return workload.name, Prepared(requests, answers, kinds, texts, tokenizer)


def int_at_least(value: Any, what: str, least: int) -> int:
    """A config value that must be an integer >= `least` (Hydra passes `concurrency=` as an empty string)."""
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit() \
            or int(value) < least:
        raise UserError(f"{what} must be an integer >= {least}, got {value!r}")
    return int(value)


def failed_result(req: GenerationRequest, exc: BaseException, arrival_s: float) -> GenerationResult:
    return GenerationResult(index=req.index, prompt_ids=list(req.prompt_ids), output_ids=[], finish_reason="error",
                            arrival_s=arrival_s, finish_s=time.perf_counter(), error=f"{type(exc).__name__}: {exc}")


def poisson_arrivals(count: int, rate: float, seed: int) -> list[float]:
    """Seconds after the start at which each request arrives: a seeded Poisson process of `rate` per second."""
    rng = random.Random(seed)
    t, times = 0.0, []
    for _ in range(count):
        times.append(t)
        t += rng.expovariate(rate)
    return times


async def drive(system: ServingSystem, requests: list[GenerationRequest], clients: int,
                on_result: Callable[[GenerationResult], None],
                arrivals: list[float] | None = None) -> tuple[list[GenerationResult], float, str | None]:
    """Run `clients` closed-loop clients over the requests, or (with `arrivals`, seconds from the start per
    request) send each at its time. Returns (results, elapsed seconds, crash or None)."""
    results: list[GenerationResult] = []
    crash: list[str] = []
    storage: list[StorageError] = []  # a result that could not be written: no new requests, raised at the end

    async def send(req: GenerationRequest) -> None:
        sent = time.perf_counter()
        try:
            result = await system.generate(req)
        except UserError as exc:  # this request was rejected or failed; the system is fine
            result = failed_result(req, exc, sent)
        except Exception as exc:  # noqa: BLE001 - anything else: the system is gone
            crash.append(f"{type(exc).__name__}: {exc}")
            result = failed_result(req, exc, sent)
        results.append(result)
        try:
            on_result(result)
        except StorageError as exc:
            storage.append(exc)

    pending = iter(requests)

    async def client() -> None:
        for req in pending:
            if crash or storage:
                return
            await send(req)

    async def timed(req: GenerationRequest, at: float) -> None:
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        if not (crash or storage):
            await send(req)

    start = time.perf_counter()
    if arrivals is None:
        await asyncio.gather(*(client() for _ in range(max(1, clients))))
    else:
        await asyncio.gather(*(timed(req, at) for req, at in zip(requests, arrivals, strict=True)))
    if storage:
        raise storage[0]
    return results, time.perf_counter() - start, (crash[0] if crash else None)


def result_row(result: GenerationResult, prep: Prepared, position: dict[int, int]) -> dict[str, Any]:
    """The requests.jsonl line: the result (with its routing trace `model_runs` and `commit_ms`), the prompt
    and output text, and where the workload is graded the gold answer, the answer extracted from the output
    and whether it is correct, so errors can be read off the file without rerunning anything."""
    row = result.to_json()
    i = position[result.index]
    row["prompt_text"] = prep.texts[i]
    if prep.tokenizer is not None:
        row["text"] = prep.tokenizer.decode(result.output_ids, skip_special_tokens=True)
    answer, kind = prep.answers[i], prep.kinds[i]
    graded = answer is not None and kind != "none"
    row.update(gold=answer if graded else None, extracted=None, correct=None)
    if graded and "text" in row and result.finish_reason != "error":
        from tokenrouter.tasks.grading import extract_answer, extract_choice, is_correct

        row["extracted"] = (extract_choice if kind == "choice" else extract_answer)(row["text"])
        row["correct"] = bool(is_correct(row["text"], answer, kind))
    elif graded and result.finish_reason == "error":
        row["correct"] = False
    return row


def slo_config(cfg: Any) -> dict[str, float]:
    """`slo.{ttft,tpot,e2el}_ms` (null = not part of the SLO) as bench_serving's goodput SLO dict."""
    node = plain(cfg.get("slo")) or {}
    if not isinstance(node, dict):
        raise UserError(f"slo must be a mapping of ttft_ms / tpot_ms / e2el_ms, got {node!r}")
    slo = {}
    for key, value in node.items():
        metric = str(key).removesuffix("_ms")
        if metric not in SLO_METRICS or not str(key).endswith("_ms"):
            raise UserError(f"slo: unknown key {key!r}; known: {[m + '_ms' for m in SLO_METRICS]}")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise UserError(f"slo.{key} must be a number of milliseconds > 0 (or null), got {value!r}")
        slo[metric] = float(value)
    return slo


async def warm_up(system: ServingSystem, prep: Prepared, count: int, clients: int, name: str) -> None:
    """Run the workload's first `count` requests once, untimed and unrecorded (first-step compilation,
    allocator and cache warm-up), as bench_serving's --warmup-requests. The system's own counters include
    them unless it resets them (`reset_stats`); the summary's latency and throughput figures do not."""
    if count <= 0:
        return
    warm = [prep.requests[i % len(prep.requests)] for i in range(count)]
    _, _, crash = await drive(system, warm, min(clients, count), lambda _: None)
    if crash is not None:
        raise RunFailed(f"system {name} crashed during warm-up: {crash}")
    system.reset_stats()


@dataclass(frozen=True)
class RunPlan:
    """The top-level config values of a run, parsed and checked once, before anything is built."""

    arrival: str
    concurrency: int
    seed: int
    request_rate: float | None  # poisson only
    slo: dict[str, float]
    warmup: int

    @classmethod
    def of(cls, cfg: Any) -> RunPlan:
        arrival = str(cfg.get("arrival", "closed_loop"))
        if arrival not in ARRIVALS:
            raise UserError(f"arrival must be one of {ARRIVALS}, got {arrival!r}")
        return cls(arrival=arrival, concurrency=int_at_least(cfg.get("concurrency", 1), "concurrency", 1),
                   seed=seed_value(cfg.get("seed", 0)),
                   request_rate=request_rate(cfg) if arrival == "poisson" else None, slo=slo_config(cfg),
                   warmup=int_at_least(cfg.get("warmup_requests", 0), "warmup_requests", 0))

    def clients(self, requests: int) -> int:
        """Requests in flight at most: N closed-loop clients, else every request (open loop)."""
        return self.concurrency if self.arrival == "closed_loop" else requests


@dataclass
class Measured:
    """What the measured part of a run produced, by workload index."""

    results: list[GenerationResult]
    rows: list[dict[str, Any]]  # their requests.jsonl lines
    elapsed: float
    stats: dict[str, Any]  # the system's counters after the run
    extra: dict[str, Any]  # its summary_extra
    before: machine.Snapshot
    after: machine.Snapshot


async def run_system(cfg: Any, out: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Build the workload and the system, run every request, write requests.jsonl and summary.json (with
    `config`, the resolved config as plain data, as its record); returns what summary.json holds."""
    plan = RunPlan.of(cfg)
    specs = {m.name: m for m in model_specs(cfg.models)}
    problems = start_problems(cfg)
    if problems:
        raise UserError(problems[0])
    system = build_system(cfg)
    workload_name, prep = prepare(cfg, specs[system.model_names[0]], plan.seed)
    clients = plan.clients(len(prep.requests))
    system.calibrate(prep.requests, prep.texts)
    run = await measure(cfg, system, prep, plan, clients, out)
    fields = summary_fields(cfg, plan, system, list(specs.values()), workload_name, prep, run, clients, out)
    return run_record.write_summary(out, run_record.build(fields, config))


async def measure(cfg: Any, system: ServingSystem, prep: Prepared, plan: RunPlan, clients: int,
                  out: Path) -> Measured:
    """Start the system, warm it up, run every request (each written to requests.jsonl as it finishes) and
    close it; RunFailed when it crashed or every request failed."""
    arrivals = poisson_arrivals(len(prep.requests), plan.request_rate, plan.seed) if plan.request_rate else None
    position = {r.index: i for i, r in enumerate(prep.requests)}
    rows: list[dict[str, Any]] = []
    with ResultLog(out / REQUESTS_FILE) as requests_log, _progress(len(prep.requests), cfg, plan) as bar:

        def on_result(result: GenerationResult) -> None:
            rows.append(result_row(result, prep, position))
            requests_log.write(rows[-1])
            bar.update(1)

        try:
            try:
                await system.start()
            except UserError:
                raise
            except Exception as exc:  # noqa: BLE001 - a system that cannot start is a failed run, not a bug here
                raise RunFailed(f"system {cfg.system.name} failed to start: {type(exc).__name__}: {exc}") from exc
            await warm_up(system, prep, plan.warmup, clients, cfg.system.name)
            trace = system.trace_log()
            if trace is not None:
                trace.start_window(time.perf_counter())  # the warm-up is not part of the trace
            # what exists now (engines run in this process by lock-step / Std. Serving, torch) is out of the
            # cyclic GC's full collections for the measured part, as in TokenRouter's subservers (heap.py):
            # every system gets the same treatment
            freeze_startup()
            before = machine.snapshot()
            try:
                results, elapsed, crash = await drive(system, prep.requests, clients, on_result, arrivals)
            finally:
                gc.unfreeze()
            after = machine.snapshot()
            stats = await system.refresh_stats()
            extra = system.summary_extra()
        finally:
            await system.close()
    if crash is not None:
        raise RunFailed(f"system {cfg.system.name} crashed: {crash} ({len(results)} of {len(prep.requests)} "
                        f"requests recorded in {out / REQUESTS_FILE})")
    if results and all(r.finish_reason == "error" for r in results):
        raise RunFailed(f"every request failed, e.g. {results[0].error} (see {out / REQUESTS_FILE})")
    order = sorted(range(len(results)), key=lambda k: results[k].index)
    return Measured([results[k] for k in order], [rows[k] for k in order], elapsed, stats, extra, before, after)


def summary_fields(cfg: Any, plan: RunPlan, system: ServingSystem, specs: list[ModelSpec], workload: str,
                   prep: Prepared, run: Measured, clients: int, out: Path) -> dict[str, Any]:
    """summary.json's keys of a measured run, but its config record: figures, labels, what the system adds,
    the model's prediction and checks, the machine's state, provenance (and with runtime.trace, trace.json
    written and its figures). Logs infeasible thresholds and contended timings."""
    from tokenrouter.evals.metrics import serving_metrics, steady_throughput, summarize
    from tokenrouter.perfmodel.validity import model_validity

    graded = [row["correct"] for row in run.rows]
    correct = graded if graded and all(c is not None for c in graded) else None
    figures = summarize(run.results, run.elapsed, system.model_names, correct)
    tokens = figures["tokens_per_model"]
    total = sum(tokens.values())
    labels = run_info(cfg, plan, system, workload, clients)
    note = infeasible_note(labels["thresholds_spec"], labels["thresholds"], clients)
    if note is not None:
        log.warning("%s", note)
    state = machine.record(run.before, run.after, machine.step_times(run.stats, specs, cfg.models.get("name")))
    reasons = machine.worst([machine.contention(state)])
    if reasons:
        log.warning("timings of this run are contended: %s", "; ".join(reasons))
    trace: dict[str, Any] = {}
    if cfg.runtime.get("trace", False):
        from tokenrouter.evals.run_trace import write_run_trace

        trace["trace"] = write_run_trace(out, system, cfg.system.name, run.results, run.rows, prep.tokenizer)
    return {
        **figures,
        "steady_throughput_tok_s": steady_throughput(run.results, clients) if plan.arrival == "closed_loop" else None,
        # the share of the model SET's last (strong) model, also when the system serves part of the set (single)
        "large_token_share": tokens.get(specs[-1].name, 0) / total if total else None,
        **serving_metrics(run.results, run.elapsed, plan.slo),
        **labels,
        "warmup_requests": plan.warmup,
        "stats": run.stats,
        **run.extra,
        "predicted_throughput_tok_s": predicted_throughput(cfg, plan, system, clients),
        # geometric run lengths and stationary rates per model, from `model_runs` (None when the rows have none)
        "model_validity": model_validity(run.rows, system.model_names),
        "machine": state,
        "provenance": provenance([str(m.get("device", "cpu")) for m in cfg.models.members]),
        **trace,
        "sweeper": sweeper_choice(),
    }


def request_rate(cfg: Any) -> float:
    rate = cfg.get("request_rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
        raise UserError(f"arrival=poisson needs request_rate (requests per second) > 0, got {rate!r}")
    return float(rate)


def run_info(cfg: Any, plan: RunPlan, system: ServingSystem, workload: str, clients: int) -> dict[str, Any]:
    """What identifies the run in a results table (open-loop runs: concurrency = the number of requests,
    the most that can be in flight; their thresholds follow the live count)."""
    return {
        "experiment": cfg.get("experiment_name"),
        "system": cfg.system.name,
        "model_set": cfg.models.get("name"),
        "tp": "/".join(str(m.get("tp", 1)) for m in cfg.models.members),  # per member, e.g. "1/2"
        "algorithm": plain(cfg.algorithm),
        "workload": workload,
        "arrival": plan.arrival,
        "request_rate": plan.request_rate,
        "concurrency": clients,
        "seed": plan.seed,
        "delayed_batching": bool(cfg.runtime.get("delayed_batching", True)),
        "thresholds_spec": plain(cfg.runtime.get("thresholds")),
        "thresholds": system.batching_thresholds(clients) if plan.arrival != "poisson" else None,
    }


def predicted_throughput(cfg: Any, plan: RunPlan, system: ServingSystem, n: int) -> float | None:
    """The throughput model's prediction for closed-loop runs on sim engines with a fixed-rate algorithm
    (perfmodel presets: bernoulli, rstitch with p01/p10, ensemble): TokenRouter from the Markov chain at the
    thresholds it used, lock-step (bernoulli only) in closed form. None where no prediction applies."""
    specs = model_specs(cfg.models)
    if any(s.engine != "sim" for s in specs) or plan.arrival != "closed_loop":
        return None
    from tokenrouter.config import AlgorithmSpec
    from tokenrouter.engine.sim import sim_latency
    from tokenrouter.perfmodel import SystemSpec, preset_for_algorithm, throughput
    from tokenrouter.perfmodel.lockstep import lockstep_throughput

    algorithm = AlgorithmSpec.from_dict(cfg.algorithm)
    latencies = [sim_latency(s.sim) for s in specs]
    name = cfg.system.name
    if name == "lockstep" and algorithm.name == "bernoulli" and len(specs) == 2:
        route, commit = preset_for_algorithm("bernoulli", {"route_prob": algorithm.params.get("route_prob", 0.35)})
        return lockstep_throughput(SystemSpec.build(route, commit, latencies, max_concurrency=n), n)
    thresholds = system.batching_thresholds(n) if name == "tokenrouter" else None
    if thresholds is None:
        return None
    try:
        route, commit = preset_for_algorithm(algorithm.name, algorithm.params)
    except UserError:
        return None  # no fixed routing rates (learned routers): nothing to predict
    if len(route) != len(specs):
        return None
    spec = SystemSpec.build(route, commit, latencies, max_concurrency=n)
    return throughput(spec, n, thresholds).throughput_tok_s


class ResultLog:
    """requests.jsonl: one JSON line per finished request, flushed as it is written (a crash keeps every line
    before it). A write the storage refuses is a StorageError naming the file; the file is then closed
    without a second attempt (closing would flush the same bytes into the same full disk)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fh: IO[str] | None = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise StorageError(path, exc) from None

    def write(self, row: dict[str, Any]) -> None:
        if self._fh is None:
            raise StorageError(self.path, OSError(0, "closed after an earlier write failed"))
        try:
            self._fh.write(json.dumps(row, default=str) + "\n")
            self._fh.flush()
        except OSError as exc:
            self._abandon()
            raise StorageError(self.path, exc) from None

    def _abandon(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                os.close(fh.fileno())  # the descriptor, not the buffer: nothing more is written
            with contextlib.suppress(OSError, ValueError):
                fh.close()

    def __enter__(self) -> ResultLog:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is None:
            return
        try:
            self._fh.close()
        except OSError as err:
            self._abandon()
            raise StorageError(self.path, err) from None


def _progress(total: int, cfg: Any, plan: RunPlan) -> Any:
    from tqdm import tqdm

    desc = f"{cfg.system.name} N={plan.concurrency}"
    return tqdm(total=total, desc=desc, unit="req", disable=None, leave=False)


def resolved(cfg: Any) -> dict[str, Any]:
    """The job config resolved to plain data: what summary.json records and its hash covers."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def sweeper_choice() -> str | None:
    """The Hydra sweeper that made this run (`basic`: a grid; e.g. `optuna_pareto`: a search), so a report can
    tell a search's frontier from a grid's; None for a single run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode == RunMode.RUN:
        return None
    choice = HydraConfig.get().runtime.choices.get("hydra/sweeper")
    return str(choice) if choice is not None else None


def resume_mode(cfg: Any) -> str:
    mode = cfg.get("resume", "check")
    if mode not in RESUME_MODES:
        raise UserError(f"resume must be one of {RESUME_MODES}, got {mode!r}")
    return str(mode)


def write_hydra_files(cfg: Any, out: Path) -> None:
    """What Hydra would write to `.hydra/` (config, hydra, overrides), written here under the run dir's lock:
    Hydra itself (hydra.output_subdir: null) would write them before any lock, over a running point's files."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    try:
        (out / ".hydra").mkdir(exist_ok=True)
    except OSError as exc:
        raise StorageError(out / ".hydra", exc) from None
    atomic_write_text(out / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
    if HydraConfig.initialized():
        hydra = HydraConfig.instance().cfg
        atomic_write_text(out / ".hydra" / "hydra.yaml", OmegaConf.to_yaml(hydra))
        atomic_write_text(out / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(hydra.hydra.overrides.task))


def run(cfg: Any) -> Outcome:
    """Hydra task function: one run into Hydra's output dir (skipped in a sweep when already complete)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    hydra_cfg = HydraConfig.get()
    out = Path(hydra_cfg.runtime.output_dir)
    mode = resume_mode(cfg)
    config = resolved(cfg)
    # the CLI already holds a single run's dir and a sweep's dir; this also keeps a point of a sweep from
    # another writer (e.g. a single run aimed at it, or a launcher's worker process)
    with locked_dir(out, "run directory"):
        # `Hydra.run` sets mode RUN; jobs of a sweep carry MULTIRUN (or None when launched through Hydra's API)
        single = hydra_cfg.mode == RunMode.RUN
        done = completed_summary(out, config, mode, single=single)
        if done is not None:
            log.info("skipping %s: it holds this point's results (%s)", out, SUMMARY_FILE)
            return Outcome(done, skipped=True)
        (out / SUMMARY_FILE).unlink(missing_ok=True)  # a damaged summary must not outlive a failed rerun
        write_hydra_files(cfg, out)
        atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        summary = event_loop.run(run_system(cfg, out, config))
    log.info("%s: %.1f tok/s over %d requests -> %s", cfg.system.name, summary["throughput_tok_s"] or 0.0,
             summary["num_requests"], out)
    return Outcome(summary, skipped=False)


@dataclass(frozen=True)
class Outcome:
    """What one job did: its summary, and whether it was a finished point kept from an earlier launch."""

    summary: dict[str, Any]
    skipped: bool


def completed_summary(out: Path, config: dict[str, Any], mode: str = "check",
                      single: bool = False) -> dict[str, Any] | None:
    """The summary of a completed point, or None when the point must (re)run: no summary.json, or one that
    does not validate (cut short by a crash, empty, foreign: reported and rerun rather than trusted). A valid
    summary of ANOTHER config is refused (UserError naming the differing keys) unless `mode` is "rerun",
    which moves the point's files to .superseded/ first: results are never relabelled, never lost. A `single`
    run (not a sweep point) measures again: its dir's results of the same config are moved aside first."""
    stored = run_record.read_summary(out)
    if stored.summary is None:
        if stored.exists:
            log.warning("%s: %s: rerunning this point", stored.path, stored.problem)
        return None
    same = stored.summary["config_hash"] == run_record.config_hash(config)
    if same and not single:
        return stored.summary
    if same or mode == "rerun":
        kept = supersede(out, stored.summary["config_hash"])
        whose = "this config" if same else "another config"
        log.warning("%s held results of %s: moved to %s, running it again", out, whose, kept)
        return None
    differences = run_record.config_differences(stored.summary["config"], config) or "values differ in type"
    where = "hydra.run.dir" if single else "hydra.sweep.dir"
    raise UserError(f"{out} holds results of another config ({differences}); pass resume=rerun to move them to "
                    f"{out / SUPERSEDED_DIR} and rerun, or use another {where}")


def supersede(out: Path, old_hash: str) -> Path:
    """Move a point's previous results (summary, requests, configs, log) under .superseded/<time>-<hash>/."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = out / SUPERSEDED_DIR / f"{stamp}-{old_hash[:12]}"
    try:
        target.mkdir(parents=True, exist_ok=False)
        for name in (SUMMARY_FILE, REQUESTS_FILE, "config.yaml", ".hydra"):
            if (out / name).exists():
                os.replace(out / name, target / name)
    except OSError as exc:
        raise StorageError(exc.filename or target, exc) from None
    return target
