"""`tokenrouter plan [-m] [OVERRIDES...] [--gpus N] [--gpu-memory-gib G]`: what a run (or each job of a sweep)
will do, before any weights load: engines, TP ranks and devices, weights, the KV and reserve the joint memory
plan gives each model per device, routers and thresholds, the launcher, and what must be downloaded.

Why: the plan is the one `tokenrouter bench` makes before it starts anything (engine/memory_plan.py), so a
set that `plan` rejects never starts; and with --gpus / --gpu-memory-gib anyone can check a cluster's setting
from a laptop, offline: sizes come from the checkpoints on disk, else from the footprints the model sets record.
Exit 0 when every job fits, 2 with one line naming the job, model and device when one cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.errors import UserError

HELP = "check what a run or sweep will load, where, and whether it fits, before anything starts"
GIB = 2**30


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter plan", description=HELP)
    p.add_argument("-m", "--multirun", action="store_true", help="plan every job of the sweep")
    p.add_argument("--gpus", type=int, default=None, help="plan for N GPUs (default: this machine's)")
    p.add_argument("--gpu-memory-gib", type=float, default=None, help="memory of each GPU in GiB (with --gpus)")
    p.add_argument("overrides", nargs="*", help="the same Hydra overrides as `tokenrouter bench`")
    return p


def device_totals(gpus: int | None, memory_gib: float | None) -> dict[str, int] | None:
    """cuda:i -> bytes for a described node, or None for this machine's devices."""
    if gpus is None and memory_gib is None:
        return None
    if gpus is None or memory_gib is None or gpus < 1 or not memory_gib > 0:
        raise UserError("--gpus N and --gpu-memory-gib G go together (N >= 1, G > 0)")
    return {f"cuda:{i}": int(memory_gib * GIB) for i in range(gpus)}


def sweep_jobs(hydra: Any, overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper expands them (the config's hydra.sweeper.params, then the
    command line's, as a grid). A search sweeper (Optuna) has no job list before it runs: its defaults only."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    cfg = hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN)
    sweeper = cfg.hydra.sweeper
    if "BasicSweeper" not in str(sweeper.get("_target_")):
        return [overrides]
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *overrides])
    return [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]]


@dataclass
class JobPlan:
    """One job: its config, the planned specs and the text block describing them."""

    text: str
    problem: str | None


def plan_job(cfg: Any, totals: dict[str, int] | None) -> JobPlan:
    from tokenrouter.config import model_specs
    from tokenrouter.engine.memory_plan import cuda_totals, demand, model_size, plan_memory, planned_models
    from tokenrouter.evals.preconditions import missing_packages, start_problems

    specs = model_specs(cfg.models)
    cuda = planned_models(specs)
    lines = [f"  system {cfg.system.name}, algorithm {cfg.algorithm.name}, models {cfg.models.get('name')}, "
             f"N={cfg.get('concurrency')}, workload {cfg.workload.get('name')}"]
    devices = totals if totals is not None else cuda_totals()
    if cuda and not devices:
        return JobPlan("\n".join(lines), "this machine has no CUDA device: pass --gpus N --gpu-memory-gib G to "
                                         "check the plan for a GPU node")
    problems = start_problems(cfg, here=totals is None)
    if problems:
        return JobPlan("\n".join(lines), problems[0])
    if totals is not None:  # a node described by --gpus: its environment, not this one, must have them
        lines += [f"  note: {p}" for p in missing_packages(cfg)]
    sizes = {s.name: model_size(s) for s in specs if s.engine != "sim"}
    demands = [demand(s, sizes[s.name].numel, sizes[s.name].config) for s in cuda]
    try:
        kv = plan_memory(demands, devices or {})
    except UserError as exc:
        return JobPlan("\n".join(lines), str(exc))
    lines.append(f"  {'model':<8}{'engine':<8}{'devices':<16}{'dtype':<10}{'weights/dev':>12}{'KV/dev':>11}"
                 f"{'KV tokens':>12}{'reserve/dev':>13}  size from")
    by_name = {d.name: d for d in demands}
    for spec in specs:
        size = sizes.get(spec.name)
        d = by_name.get(spec.name)
        devs = ",".join(d.devices) if d else spec.device
        weights = f"{d.weights_bytes / GIB:.2f} GiB" if d else "-"
        if d is not None and spec.name in kv:
            kv_text, tok_text = f"{kv[spec.name] / GIB:.2f} GiB", f"{kv[spec.name] // d.kv_bytes_per_token:,}"
        elif d is not None:
            kv_text, tok_text = f"{d.kv_bytes / GIB:.2f} GiB", f"{d.kv_bytes // d.kv_bytes_per_token:,}"
        else:
            kv_text, tok_text = "-", f"{spec.kv_tokens:,}" if spec.engine != "sim" else "-"
        reserve = f"{d.reserve_bytes / GIB:.2f} GiB" if d else "-"
        where = "sim" if size is None else "checkpoint" if size.measured else "footprint"
        lines.append(f"  {spec.name:<8}{spec.engine:<8}{devs:<16}{spec.dtype:<10}{weights:>12}{kv_text:>11}"
                     f"{tok_text:>12}{reserve:>13}  {where}")
    lines += short_kv_warnings(cfg, specs, kv, by_name)
    for dev in sorted({dev for d in demands for dev in d.devices}):
        here = [d for d in demands if dev in d.devices]
        used = sum(d.weights_bytes + d.reserve_bytes + kv.get(d.name, d.kv_bytes) * (1 + d.kv_overhead) for d in here)
        lines.append(f"  {dev}: {used / GIB:.1f} of {devices[dev] / GIB:.1f} GiB planned "
                     f"({', '.join(d.name for d in here)})")
    lines.append(f"  routing: {_routing(cfg)}; thresholds {cfg.runtime.get('thresholds')}"
                 f"{' (planned at start from step latencies)' if cfg.runtime.get('thresholds') == 'auto' else ''}")
    downloads = _downloads(specs, sizes)
    if downloads:
        lines.append(f"  download first: {downloads}")
    return JobPlan("\n".join(lines), None)


def in_flight(cfg: Any) -> tuple[int | None, str]:
    """How many requests can be in flight at once, and what says so: N clients in a closed loop; with
    `arrival: all_at_once` every request of the workload (its limit or size when the config gives one)."""
    if cfg.get("arrival", "closed_loop") != "all_at_once":
        n = cfg.get("concurrency")
        return (n if isinstance(n, int) else None), "N"
    workload = cfg.workload
    for key in ("limit", "num_problems", "num_requests"):
        value = workload.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value, "all at once"
    return None, "all at once"


def short_kv_warnings(cfg: Any, specs: list, kv: dict[str, int], demands: dict) -> list[str]:
    """A model whose planned KV cannot hold every in-flight request's outputs (in flight x max_new_tokens,
    prompts not counted) would queue requests for KV: the run is valid but not the setting it says it is.
    Admission reserves each request's worst case on every model it may visit."""
    n, what = in_flight(cfg)
    new_tokens = cfg.workload.get("max_new_tokens")
    if not isinstance(new_tokens, int):
        return []
    out = []
    for spec in specs:
        d = demands.get(spec.name)
        if d is None or spec.name not in kv:
            continue
        tokens = kv[spec.name] // d.kv_bytes_per_token
        fits = tokens // new_tokens
        if n is None and what == "all at once":
            out.append(f"  note: {spec.name}'s KV holds {tokens:,} tokens: about {fits} requests of {new_tokens:,} "
                       "new tokens in flight at once (arrival all_at_once: the rest queue for KV)")
        elif n is not None and tokens < n * new_tokens:
            out.append(f"  warning: {spec.name}'s KV holds {tokens:,} tokens, less than {n} in flight ({what}) x "
                       f"{new_tokens:,} new tokens: about {fits} run at once, the rest queue for KV (raise its "
                       "mem_fraction, tp, or use more devices)")
    return out


def _routing(cfg: Any) -> str:
    router = cfg.algorithm.get("router")
    return f"{cfg.algorithm.name}" + (f" with router {router}" if router else "")


def _downloads(specs: list, sizes: dict) -> str:
    """Hub models not in the cache, and about how much disk their checkpoints take (bf16/fp16 files)."""
    from tokenrouter.engine.loader import loadable_source

    missing = [(s.source, sizes[s.name].numel * 2) for s in specs
               if s.engine != "sim" and not loadable_source(s.source).is_local]
    if not missing:
        return ""
    total = sum(b for _, b in missing)
    return f"{total / GIB:.1f} GiB ({', '.join(f'{src} {b / GIB:.1f} GiB' for src, b in missing)})"


def _launcher(cfg: Any) -> str:
    from omegaconf import OmegaConf

    launcher = cfg.hydra.launcher
    name = str(cfg.hydra.runtime.choices.get("hydra/launcher"))
    try:
        n_jobs = OmegaConf.to_container(launcher, resolve=True).get("n_jobs")  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a launcher setting that needs the job's own config
        n_jobs = None
    at_once = n_jobs if n_jobs is not None else 1 if name == "basic" else "as the cluster schedules them"
    return f"launcher {name}, jobs at once: {at_once}"


def run(argv: list[str]) -> int:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    from tokenrouter.cli.bench import _one_line, hydra_app
    from tokenrouter.cli.config_keys import algorithm_by_name, check_sweep_keys, hydra_error
    from tokenrouter.cli.hydra_config import conf_dir

    args = _parser().parse_intermixed_args(argv)
    args.overrides = algorithm_by_name(args.overrides)  # overrides before and after the flags
    totals = device_totals(args.gpus, args.gpu_memory_gib)
    hydra = hydra_app(conf_dir())
    try:
        jobs = sweep_jobs(hydra, args.overrides) if args.multirun else [args.overrides]
        check_sweep_keys(hydra, jobs)
        mode = RunMode.MULTIRUN if args.multirun else RunMode.RUN
        where = f"{args.gpus} x {args.gpu_memory_gib:g} GiB GPUs" if totals else "this machine's devices"
        print(f"plan for {where}: {len(jobs)} job(s)")
        for i, job in enumerate(jobs):
            cfg = hydra.compose_config("config", job, run_mode=mode)
            if i == 0:
                print(_launcher(cfg))
            result = plan_job(cfg, totals)
            print(f"job {i}: {' '.join(o for o in job if not o.startswith('hydra.')) or '(defaults)'}")
            print(result.text)
            if result.problem is not None:
                raise UserError(f"job {i} cannot run: {result.problem}")
    except (HydraException, OmegaConfBaseException) as exc:
        raise UserError(hydra_error(hydra, _one_line(exc), args.overrides)) from None
    finally:
        GlobalHydra.instance().clear()
    print(f"every job fits ({len(jobs)})")
    return 0
