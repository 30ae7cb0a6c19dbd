"""`runtime.thresholds=auto`: the B*(N) table from the throughput model (tokenrouter.perfmodel).

Why here and not in the scheduler: the front end owns N and sends every subserver its threshold, so the
(possibly slow, disk-cached) search runs once, in one process, off the event loop. The model needs step
latencies and routing rates. Latencies: a model's `latency_profile` (a `tokenrouter profile` JSON, any engine,
or `auto`: measured by its subserver at start-up, so the table is computed once every subserver is ready),
else a sim engine's SimSpec. Rates: the entry model's algorithm's `rates()` (its fixed params or, for learned
routers, the held-out route rate saved with the router file), else the algorithm's config params
(perfmodel's presets); the algorithm's `needs.rates` says whether they follow the decisions counted while
serving, i.e. whether to re-plan. When either is unknown the documented default is all ones: plain continuous
batching, never a stall.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from tokenrouter.algorithms import algorithm_class, build_algorithm
from tokenrouter.children import child_env, decode_config
from tokenrouter.config import AUTO_PROFILE, AlgorithmSpec, ModelSpec, RuntimeConfig
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.engine.sim import sim_latency
from tokenrouter.errors import UserError
from tokenrouter.runtime.thresholds import ThresholdTable

log = logging.getLogger(__name__)


def model_latency(model: ModelSpec, measured: dict[str, Any] | None = None) -> LatencyProfile | None:
    """The model's step-latency profile, or None when unknown (a non-sim engine without `latency_profile`).
    `latency_profile: auto` takes `measured` (what its subserver profiled at start-up). A `latency_profile`
    file that is missing or malformed is a UserError, not a silent fallback."""
    if model.latency_profile == AUTO_PROFILE:
        return LatencyProfile.from_dict(measured, f"model {model.name!r} start-up profile") if measured else None
    if model.latency_profile:
        return LatencyProfile.from_json(model.latency_profile)
    return sim_latency(model.sim) if model.engine == "sim" else None


def startup_profiles(models: list[ModelSpec], runtime: RuntimeConfig) -> list[bool]:
    """Per model, whether its subserver measures its step latencies at start-up: the one place this is decided
    (the front end, before any subserver starts; each gets its answer as SubserverConfig.startup_profile). A
    `latency_profile: auto` model is profiled when something plans on the latencies: `thresholds=auto` or
    `policy=optimal` (both with delayed batching, for a set of two models or more: alone, nothing waits)."""
    planned = runtime.delayed_batching and len(models) > 1 and (runtime.thresholds == "auto"
                                                                  or runtime.policy == "optimal")
    return [planned and m.latency_profile == AUTO_PROFILE for m in models]


def routing_rates(models: list[ModelSpec], algorithm: AlgorithmSpec,
                  routes: list[list[int]] | None = None) -> tuple[str, dict[str, Any]]:
    """(preset name, preset params): the entry model's `rates(routes)` (measured when `routes` holds enough
    decisions) over the config params. Building the algorithm is cheap (learned routers read only their
    JSON sidecar here; weights load in `bind()`). Measured rates are rounded to 0.01: the table is
    insensitive to less, and the disk cache then serves nearby measurements."""
    names = [m.name for m in models]
    try:
        algo = build_algorithm(algorithm.name, 0, names, dict(algorithm.params))
        rates = algo.rates(routes if algo.needs.rates == "measured" else None)
    except UserError as exc:
        log.warning("thresholds=auto: %s; using the algorithm's config params for its routing rates", exc)
        rates = {}
    known = {k: (round(v, 2) if routes and isinstance(v, float) else v)
             for k, v in rates.items() if k != "preset" and v is not None}
    return str(rates.get("preset") or algorithm.name), {**algorithm.params, **known}


def rates_are_measured(algorithm: AlgorithmSpec) -> bool:
    """Whether the algorithm declares routing rates that follow the decisions counted while serving (learned
    routers, R-Stitch: `needs.rates == "measured"`), i.e. whether a re-tune can change anything."""
    try:
        return algorithm_class(algorithm.name).needs.rates == "measured"
    except UserError:
        return False


def latencies_known(models: list[ModelSpec], measured: list[dict[str, Any] | None] | None = None) -> bool:
    measured = measured or [None] * len(models)
    return all(model_latency(m, p) is not None for m, p in zip(models, measured, strict=True))


def plan_thresholds(models: list[ModelSpec], algorithm: AlgorithmSpec, max_n: int,
                    measured: list[dict[str, Any] | None] | None = None,
                    routes: list[list[int]] | None = None,
                    context_tokens: int | None = None) -> tuple[dict[int, list[int]] | None, str]:
    """(B*(N) for N = 1..max_n, or None, and where it came from or why there is none). `measured`: per
    model, the profile its subserver measured (`latency_profile: auto`); `routes`: decisions counted so far
    (`routes[i][j]`: model i sent a request to model j); `context_tokens`: the workload's mean context
    (`runtime.auto_context_tokens`; None: each profile's base context)."""
    from tokenrouter.perfmodel import auto_thresholds

    return _plan(auto_thresholds, models, algorithm, max_n, measured, routes, context_tokens)


def plan_launch_rules(models: list[ModelSpec], algorithm: AlgorithmSpec, max_n: int,
                      measured: list[dict[str, Any] | None] | None = None,
                      context_tokens: int | None = None) -> tuple[dict[int, list[int]] | None, str]:
    """`runtime.policy=optimal`: per N, each model's best launch rule on its own ready count (bitmasks), from
    the same inputs as plan_thresholds; None (and why) when they are unknown."""
    from tokenrouter.perfmodel import auto_local_rules

    return _plan(auto_local_rules, models, algorithm, max_n, measured, None, context_tokens)


def _plan(search: Callable[..., dict[int, list[int]]], models: list[ModelSpec], algorithm: AlgorithmSpec,
          max_n: int, measured: list[dict[str, Any] | None] | None, routes: list[list[int]] | None,
          context_tokens: int | None) -> tuple[dict[int, list[int]] | None, str]:
    if len(models) < 2:
        return None, "one model: nothing to wait for"
    measured = measured or [None] * len(models)
    latencies = [model_latency(m, p) for m, p in zip(models, measured, strict=True)]
    unknown = [m.name for m, lat in zip(models, latencies, strict=True) if lat is None]
    if unknown:
        return None, (f"model(s) {unknown} have no step-latency profile, so every batch threshold is 1 (delayed "
                      "batching off in effect); models.members.N.latency_profile=auto measures one at start-up "
                      "(the local CPU sets leave it off on purpose: docs/status.md, delayed batching on the local "
                      "CPU pair), or give a `tokenrouter profile` JSON")
    from tokenrouter.perfmodel import preset_for_algorithm

    preset, params = routing_rates(models, algorithm, routes)
    try:
        route, commit = preset_for_algorithm(preset, params)
    except UserError as exc:
        if not rates_are_measured(algorithm):
            # never run it silently with thresholds of 1 while a rival with a preset gets planned ones
            raise UserError(f"runtime.thresholds=auto: algorithm {algorithm.name!r} gives no usable throughput-model "
                            f"preset ({exc}); give runtime.thresholds explicitly (e.g. [1, 2]), or have its rates() "
                            "return a preset, or declare needs.rates='measured' to plan from counted decisions") from None
        return None, f"{exc} (measured once the runtime has counted decisions)"
    if len(route) != len(models):
        return None, f"the {preset!r} preset describes {len(route)} models, not {len(models)}"
    rates = {k: v for k, v in params.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    table = search(route, commit, [lat for lat in latencies if lat is not None], max_n,
                   context_tokens=context_tokens)
    at = f", step times at context {context_tokens}" if context_tokens is not None else ""
    return table, f"throughput model, {preset} {rates}{at}"


def plan_or_warn(models: list[ModelSpec], algorithm: AlgorithmSpec, max_n: int,
                 measured: list[dict[str, Any] | None] | None = None,
                 context_tokens: int | None = None) -> tuple[dict[int, list[int]] | None, str]:
    """plan_thresholds, logging why when there is no table (the caller then uses all ones)."""
    table, why = plan_thresholds(models, algorithm, max_n, measured, context_tokens=context_tokens)
    if table is None and len(models) > 1 and why not in _SAID:
        _SAID.add(why)  # once per process (serve plans at start and again for its front end)
        log.warning("thresholds=auto: %s", why)
    return table, why


_SAID: set[str] = set()


def auto_table(models: list[ModelSpec], algorithm: AlgorithmSpec, max_n: int,
               measured: list[dict[str, Any] | None] | None = None,
               context_tokens: int | None = None) -> dict[int, list[int]] | None:
    """B*(N) for N = 1..max_n, or None (caller uses all ones) with a logged reason."""
    return plan_or_warn(models, algorithm, max_n, measured, context_tokens)[0]


def workload_context(prompt_lengths: list[int], max_new_tokens: list[int]) -> int:
    """`runtime.auto_context_tokens` for a workload: the mean KV per request over its life, prompt plus half
    its output (taking the output as `max_new_tokens`: the answers of the long-reasoning workloads run close)."""
    if not prompt_lengths:
        raise UserError("workload_context: no requests")
    total = sum(p + n / 2 for p, n in zip(prompt_lengths, max_new_tokens, strict=True))
    return max(1, round(total / len(prompt_lengths)))


RETUNE_AT = (200, 1_000, 5_000)  # entry-model decisions after which measured routing rates are used
RETUNE_POLL_S = 0.5


class AutoThresholds:
    """`thresholds=auto` for one front end: plans B*(N) before the subservers start (latencies known up
    front) or once they report start-up profiles, then re-plans from routing rates measured while serving
    (only for algorithms whose rates follow the data). The front end owns the table; this decides it."""

    def __init__(self, models: list[ModelSpec], algorithm: AlgorithmSpec, max_n: int,
                 context_tokens: int | None = None) -> None:
        self.models = models
        self.algorithm = algorithm
        self.max_n = max_n
        self.context_tokens = context_tokens  # step times at this context (None: the profiles' base context)

    async def plan(self, measured: list[dict[str, Any] | None] | None = None) -> tuple[ThresholdTable, str]:
        """(the table, where it came from); all ones with a logged reason when it cannot be planned yet."""
        rows, why = await asyncio.to_thread(plan_or_warn, self.models, self.algorithm, self.max_n, measured,
                                            self.context_tokens)
        return ThresholdTable("auto", len(self.models), True, rows), why if rows is not None else f"all ones: {why}"

    def can_retune(self, measured: list[dict[str, Any] | None]) -> bool:
        return latencies_known(self.models, measured) and rates_are_measured(self.algorithm)

    async def retune(self, measured: list[dict[str, Any] | None], routes: Callable[[], list[list[int]]],
                     current: Callable[[], ThresholdTable], adopt: Callable[[ThresholdTable | None, str], None]) -> None:
        """At each RETUNE_AT count of entry-model decisions (`routes()[0]`), plan again at the measured rates in
        a child process (the search must not hold the serving event loop's GIL) and `adopt` the table when it
        differs from `current()` (None: same table, new source)."""
        for milestone in RETUNE_AT:
            while sum((counted := routes())[0]) < milestone:
                await asyncio.sleep(RETUNE_POLL_S)
            try:
                rows, why = await plan_in_child(self.models, self.algorithm, self.max_n, measured, counted,
                                                self.context_tokens)
            except Exception as exc:  # noqa: BLE001 - keep serving on the table we have
                log.warning("thresholds=auto: re-tuning failed (%s); keeping the current table", exc)
                return
            if rows is None:
                continue
            table, now = ThresholdTable("auto", len(self.models), True, rows), current()
            changed = [table(n) for n in range(1, self.max_n + 1)] != [now(n) for n in range(1, self.max_n + 1)]
            if changed:
                log.info("thresholds=auto: re-tuned after %d decisions (%s)", sum(counted[0]), why)
            adopt(table if changed else None, f"{why}, measured over {sum(counted[0])} decisions")


class PlanJob(msgspec.Struct, frozen=True):
    """What the planner child plans on, typed (msgpack on its stdin, decoded once: children.decode_config)."""

    models: list[ModelSpec]
    algorithm: AlgorithmSpec
    max_n: int
    measured: list[dict[str, Any] | None] | None = None
    routes: list[list[int]] | None = None
    context_tokens: int | None = None


def main() -> None:
    """`python -m tokenrouter.runtime.threshold_planner`: plan_thresholds in a child process (a PlanJob on stdin,
    JSON on stdout), so that a re-tune while serving never holds the front end's GIL, at low CPU priority."""
    os.nice(10)
    job = decode_config(sys.stdin.buffer.read(), PlanJob)
    rows, why = plan_thresholds(job.models, job.algorithm, job.max_n, job.measured, job.routes, job.context_tokens)
    json.dump({"rows": None if rows is None else {str(n): b for n, b in rows.items()}, "why": why}, sys.stdout)


async def plan_in_child(models: list[ModelSpec], algorithm: AlgorithmSpec, max_n: int,
                        measured: list[dict[str, Any] | None] | None,
                        routes: list[list[int]] | None,
                        context_tokens: int | None = None) -> tuple[dict[int, list[int]] | None, str]:
    """plan_thresholds run by `python -m tokenrouter.runtime.threshold_planner` (killed if the caller is cancelled)."""
    job = msgspec.msgpack.encode(PlanJob(models, algorithm, max_n, measured, routes, context_tokens))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "tokenrouter.runtime.threshold_planner",
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=child_env())
    try:
        out, err = await proc.communicate(job)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(err.decode(errors="replace").strip().splitlines()[-1] if err else f"exit {proc.returncode}")
    result = json.loads(out)
    rows = None if result["rows"] is None else {int(n): list(b) for n, b in result["rows"].items()}
    return rows, str(result["why"])


if __name__ == "__main__":
    main()
