"""`tokenrouter rehearse [-m] [OVERRIDES...] [--gpus N --gpu-memory-gib G]`: every job of a GPU experiment,
planned for the GPUs given and then RUN on this CPU through bench's own code path, with stand-ins for what a
CPU cannot hold.

Why: reading the GPU path against the dependencies' source found jobs that would stop on the first GPU node
four times over; most of them fail on a CPU too when the same config runs through the same code with tiny
models. Each job is composed as `bench` composes it, planned as `plan` plans it (same preconditions), then run
by `bench`'s launcher into <out>/<job> with: each GPU member's checkpoint replaced by a tiny random model of the
same architecture (tokenrouter/models/stand_in.py) on the CPU, each router that is not on disk by a random
one in the official checkpoint layout, each Hub data set by a few rows in its columns, and a few requests and
tokens. A member on the sglang engine at tp > 1 runs at tp 1 (SGLang's TP collectives need CUDA; the torch
engine's TP runs over gloo) and its line says so. One line per job: REHEARSED (with what ran differently),
FAILED <why>, or NOT REHEARSED <the step a CPU cannot run>; the runs are collected into <out>/results.csv as a
sweep's are; exit 1 on any FAILED.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.errors import UserError, first_line

HELP = "run every job of an experiment on this CPU with tiny stand-in models, before a GPU node sees it"
DEFAULT_GPUS, DEFAULT_GPU_GIB = 8, 80.0


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter rehearse", description=HELP)
    p.add_argument("-m", "--multirun", action="store_true", help="rehearse every job of the sweep")
    p.add_argument("--gpus", type=int, default=None, help=f"plan for N GPUs (default {DEFAULT_GPUS})")
    p.add_argument("--gpu-memory-gib", type=float, default=None,
                   help=f"memory of each GPU in GiB (default {DEFAULT_GPU_GIB:g})")
    p.add_argument("--requests", type=int, default=2, help="requests per job (default 2)")
    p.add_argument("--tokens", type=int, default=8, help="new tokens per request (default 8)")
    p.add_argument("--out", type=Path, default=Path("runs/rehearsal"), help="run dirs (default runs/rehearsal)")
    p.add_argument("overrides", nargs="*", help="the same Hydra overrides as `tokenrouter bench`")
    return p


@dataclass(frozen=True)
class Verdict:
    """One job's outcome: REHEARSED, FAILED or NOT REHEARSED, and why."""

    status: str
    why: str = ""

    def line(self, index: int, job: list[str], took_s: float) -> str:
        shown = " ".join(o for o in job if not o.startswith("hydra.")) or "(defaults)"
        return f"job {index} [{took_s:.0f}s] {self.status}{f' {self.why}' if self.why else ''}: {shown}"


def cpu_cannot_run(cfg: Any) -> str | None:
    """The one step of a job that needs a GPU node, or None when the whole job runs here."""
    if cfg.system.name == "official_r2r" and not _official_r2r_here(cfg):
        return ("thu-nics/R2R's own server: its environment is not on this machine (`make official-venv` "
                "builds it; then its server runs here on CPU)")
    return None


def _official_r2r_here(cfg: Any) -> bool:
    """Whether the official R2R checkout the job would start is on this machine (system.repo, an installed
    `r2r`, or `make official-venv`'s copy)."""
    from tokenrouter.baselines.official_r2r import find_repo

    try:
        find_repo(cfg.system.get("repo"))
    except UserError:
        return False
    return True


def sglang_tp(cfg: Any) -> list[Any]:
    """The job's members on the sglang engine at tp > 1 (our engine, not a system's own server): SGLang's TP
    needs CUDA, so the rehearsal runs each of them at tp 1, everything else as on the node."""
    from tokenrouter.config import model_specs
    from tokenrouter.evals.preconditions import OWN_ENGINES

    if cfg.system.name in OWN_ENGINES:
        return []
    return [s for s in model_specs(cfg.models) if s.engine == "sglang" and s.tp > 1]


def note(cfg: Any) -> str:
    """What a REHEARSED line must add: the steps of the job that ran differently on CPU."""
    if cfg.system.name == "official_r2r" and any(int(m.get("tp", 1)) > 1 for m in cfg.models.members):
        return "(the official server at tp 1 on CPU: its TP collectives need CUDA)"
    sharded = ", ".join(f"{s.name} at tp={s.tp}" for s in sglang_tp(cfg))
    if sharded:
        return f"(the sglang engine at tp 1 on CPU for {sharded}: SGLang's TP collectives need CUDA)"
    return ""


def stand_in_overrides(cfg: Any, out: Path, requests: int, tokens: int) -> list[str]:
    """What replaces each GPU member, router and Hub data set of the job `cfg`, as overrides."""
    from tokenrouter.config import model_specs
    from tokenrouter.evals.stand_in_data import needs_stand_in, write_stand_in_rows
    from tokenrouter.models.stand_in import model_type, stand_in_path

    overrides = []
    specs = model_specs(cfg.models)
    at_tp1 = sglang_tp(cfg) if cfg.system.name != "official_r2r" else specs  # one process per model on CPU
    entry: Path | None = None  # the entry (small) model's stand-in, where it has one
    for i, spec in enumerate(specs):
        if not spec.device.startswith("cuda"):
            continue  # a CPU member runs as it is
        source = stand_in_path(model_type(spec.source), spec.tp, seed=i)
        entry = source if i == 0 else entry
        member = f"models.members.{i}"
        overrides += [f"++{member}.source={source}", f"++{member}.device=cpu", f"++{member}.dtype=float32",
                      f"++{member}.mem_fraction=null", f"++{member}.threads=1", f"++{member}.kv_tokens=8192"]
        if spec in at_tp1:
            overrides.append(f"++{member}.tp=1")  # TP collectives need CUDA
    router = _stand_in_router(cfg, entry or specs[0].source, out)
    if router is not None:
        key = "system.router" if cfg.system.name == "official_r2r" else "algorithm.router"
        overrides.append(f"{key}={router}")
    if needs_stand_in(cfg.workload):
        overrides.append(f"++workload.path={write_stand_in_rows(cfg.workload, requests, out / 'rows.jsonl')}")
    return [*overrides, f"++workload.limit={requests}", f"++workload.max_new_tokens={tokens}",
            "runtime.startup_timeout_s=300"]


def _stand_in_router(cfg: Any, small: Path | str, out: Path) -> Path | None:
    """A random router of the job's kind for the small model (its stand-in, or the CPU member's own `source`),
    where the job names a router that is not on this machine (a Hub reference, a cluster path): R2R's in the
    official layout, others in ours."""
    from tokenrouter.evals.preconditions import OWN_ROUTING, ROUTED_BY_A_NETWORK

    ref, kind, system = cfg.algorithm.get("router"), str(cfg.algorithm.name), cfg.system.name
    if system == "official_r2r":  # its server reads the router itself: always a stand-in beside the stand-in pair
        ref, kind = cfg.system.get("router") or ref or "official", "r2r"
        if isinstance(small, str) and Path(str(ref)).expanduser().exists():
            return None  # a CPU pair with its router on disk runs as it is
    elif kind not in ROUTED_BY_A_NETWORK or not ref or Path(str(ref)).expanduser().exists() or system in OWN_ROUTING:
        return None
    import json

    import torch

    from tokenrouter.algorithms.checkpoints import save_official, save_router
    from tokenrouter.algorithms.routers import build_router
    from tokenrouter.engine.loader import resolve_source

    small = Path(resolve_source(str(small)).location)
    config = json.loads((small / "config.json").read_text())
    hidden = config["hidden_size"]
    torch.manual_seed(0)
    if kind == "r2r":
        net = build_router("r2r", {"hidden_states_size": hidden, "vocab_size": config["vocab_size"], "hidden_dims": [32, 32],
                                   "expansion_factor": 2, "logits_size": 16})
        return save_official(net, out / "router.pt", threshold=0.5, pretrained=str(small))
    net = build_router(kind, {"hidden_states_size": hidden, "hidden_dims": [] if kind == "co_llm" else [32]})
    weights, _ = save_router(net, out / "router", 0.5, {})
    return weights


def rehearse_job(hydra: Any, job: list[str], out: Path, totals: dict[str, int], args: Any) -> Verdict:
    """Compose, plan, check and run one job (see the module docstring)."""
    from hydra.types import RunMode

    from tokenrouter.cli.bench import JobFailure, _task, launch
    from tokenrouter.cli.plan import plan_job
    from tokenrouter.evals.preconditions import missing_packages

    try:
        cfg = hydra.compose_config("config", [*job, f"hydra.run.dir={out}"], run_mode=RunMode.RUN)
        planned = plan_job(cfg, totals)
        problems = [planned.problem] if planned.problem is not None else missing_packages(cfg)  # this venv's
        if problems:
            return Verdict("FAILED", f"plan: {problems[0]}")
        gpu_only = cpu_cannot_run(cfg)
        if gpu_only is not None:
            return Verdict("NOT REHEARSED", gpu_only)
        out.mkdir(parents=True, exist_ok=True)
        stand_ins = stand_in_overrides(cfg, out, args.requests, args.tokens)
        inputs = _input_runs(hydra, job, cfg, out, totals, args)
        if isinstance(inputs, Verdict):
            return inputs
        returned, _ = launch(hydra, [*job, *stand_ins, *inputs, f"hydra.run.dir={out}"], False, _task)
    except UserError as exc:
        return Verdict("FAILED", str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever stops a job here would stop it on the GPU node
        return Verdict("FAILED", f"{type(exc).__name__}: {first_line(exc)}")
    done = returned.return_value
    if isinstance(done, JobFailure):
        return Verdict("FAILED", done.message)
    return Verdict("REHEARSED", note(cfg))


def _input_runs(hydra: Any, job: list[str], cfg: Any, out: Path, totals: dict[str, int],
                args: Any) -> list[str] | Verdict:
    """Query-level routing reads the single-model runs of its workload (`system.weak_run` / `strong_run`); on the
    node an earlier sweep made them. Where they are not on this machine, they are rehearsed first, into <out>/
    weak and strong, and the job reads those (a failure there is this job's)."""
    if cfg.system.name != "query_routing":
        return []
    names = [m["name"] for m in cfg.models.members]
    overrides = []
    for key, model in (("weak_run", names[0]), ("strong_run", names[-1])):
        given = cfg.system.get(key)
        if given and Path(str(given)).expanduser().is_dir():
            continue
        single = [*(o for o in job if not o.lstrip("+~").startswith("system")), "system=single", f"system.model={model}"]
        unset = ["~system.weak_run", "~system.strong_run"]  # where an experiment set them for query routing
        if _composes(hydra, [*single, *unset]):
            single += unset
        verdict = rehearse_job(hydra, single, out / key, totals, args)
        if verdict.status != "REHEARSED":
            return Verdict(verdict.status, f"its {key} ({model} alone): {verdict.why}")
        overrides.append(f"system.{key}={out / key}")
    return overrides


def _composes(hydra: Any, overrides: list[str]) -> bool:
    from hydra.types import RunMode

    try:
        hydra.compose_config("config", overrides, run_mode=RunMode.RUN)
    except Exception:  # noqa: BLE001 - Hydra's errors for a key that is not there to delete
        return False
    return True


def run(argv: list[str]) -> int:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from tokenrouter.cli.bench import JobFailure, _one_line, collect, hydra_app
    from tokenrouter.cli.config_keys import algorithm_by_name, check_sweep_keys, hydra_error
    from tokenrouter.cli.hydra_config import conf_dir
    from tokenrouter.cli.plan import device_totals, sweep_jobs

    args = _parser().parse_intermixed_args(argv)
    args.overrides = algorithm_by_name(args.overrides)
    if args.requests < 1 or args.tokens < 1:
        raise UserError("--requests and --tokens must be >= 1")
    gpus = args.gpus if args.gpus is not None else DEFAULT_GPUS
    memory = args.gpu_memory_gib if args.gpu_memory_gib is not None else DEFAULT_GPU_GIB
    totals = device_totals(gpus, memory)
    out = args.out.resolve()
    hydra = hydra_app(conf_dir())
    start = time.perf_counter()
    counts = {"REHEARSED": 0, "FAILED": 0, "NOT REHEARSED": 0}
    failures = []
    try:
        jobs = sweep_jobs(hydra, args.overrides) if args.multirun else [args.overrides]
        check_sweep_keys(hydra, jobs)
        print(f"rehearsing {len(jobs)} job(s) on this CPU, planned for {gpus} x {memory:g} GiB GPUs, "
              f"{args.requests} request(s) x {args.tokens} tokens each -> {out}", flush=True)
        for i, job in enumerate(jobs):
            began = time.perf_counter()
            verdict = rehearse_job(hydra, job, out / str(i), totals, args)
            counts[verdict.status] += 1
            if verdict.status == "FAILED":
                failures.append(JobFailure(str(out / str(i)), verdict.why, False))
            print(verdict.line(i, job, time.perf_counter() - began), flush=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise UserError(hydra_error(hydra, _one_line(exc), args.overrides)) from None
    finally:
        GlobalHydra.instance().clear()
    if out.is_dir():
        collect(out, failures)
    print(f"{counts['REHEARSED']} rehearsed, {counts['FAILED']} failed, {counts['NOT REHEARSED']} not rehearsed "
          f"in {time.perf_counter() - start:.0f}s")
    return 1 if counts["FAILED"] else 0
