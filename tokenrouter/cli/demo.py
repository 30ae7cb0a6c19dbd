"""`tokenrouter demo`: the whole laptop study in one command (what `make demo` runs).

Phases, each timed and reported: (1) the model pair (`models=tiny`: trained by `make-pair` when missing),
(2) the R2R router for that pair (`train-router`, cached per pair), (3) step latency of each model,
(4) the sweeps of conf/experiment/demo.yaml through the bench runner, every point once per repeat seed, into
the run directory's sweeps/ so a rerun with the same --out resumes, (5) the report: the generic ones (Pareto
plot, query-level metrics) plus the demo's own Table 3 (TokenRouter vs lock-step on the same router settings),
summary table and closing note (demo.md), which sets this run's figures beside the committed reference's.

Each run writes to a fresh directory (runs/demo/<time>) by default and never into the committed reference
(results/demo): a reference is replaced by copying a run directory's report files over it, on purpose.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback

from tokenrouter.cli.args import ArgumentParser
from tokenrouter.cli.demo_reference import REFERENCE_DIR, comparison_lines, load_reference
from tokenrouter.errors import UserError
from tokenrouter.fsutil import atomic_write_text

HELP = "the laptop study: make the local pair and its router, run the demo sweeps at N=8, report into runs/demo/<time>"
STAMP_FILE = "demo_stamp.json"
AXES = ("per_request_throughput_tok_s", "throughput_tok_s")  # the frontier verdict's throughput axes


def _parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="tokenrouter demo",
        description=(
            "Makes (or reuses) the local model pair and its R2R router, measures each model's step latency, "
            "runs the sweeps of conf/experiment/demo.yaml (TokenRouter with R2R and R-Stitch, lock-step R2R, "
            "query-level routing, both single models; N=8) and writes the report: Pareto plot, Table 3 "
            "(TokenRouter vs lock-step), summary table and demo.md with the measured figures. Runs already "
            "finished in the sweep dir are kept, so rerunning after an interruption resumes."
        ),
        epilog="examples: tokenrouter demo | tokenrouter demo --out runs/demo/mine | tokenrouter demo --smoke",
    )
    p.add_argument("--out", type=Path, default=None,
                   help="report directory (default: a fresh runs/demo/<UTC time>[-smoke]; never results/demo)")
    p.add_argument("--sweep-dir", type=Path, default=None, help="where runs go (default: OUT/sweeps)")
    p.add_argument("--fresh", action="store_true", help="discard the sweep dir's earlier runs and run every point again")
    p.add_argument("--smoke", action="store_true",
                   help="a quick end-to-end check: each sweep at its first value, a few short problems, a tiny router")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. workload.num_problems=32")
    return p


# ---- progress: Hydra instantiates its callbacks itself, so the plan reaches them through this module ---------
@dataclass
class Plan:
    total: int
    started: float = field(default_factory=time.perf_counter)
    index: int = 0
    durations: list[float] = field(default_factory=list)  # of runs actually executed (not resumed)
    current: tuple[float, bool] | None = None  # (start time, resumed)

    def eta_s(self) -> float | None:
        if not self.durations:
            return None
        return sum(self.durations) / len(self.durations) * (self.total - self.index + 1)


PLAN: Plan | None = None


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class SweepProgress(Callback):
    """Prints `[run k/T] point | elapsed, ETA` before each run and its headline figures after it."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        plan = PLAN or Plan(total=0)
        plan.index += 1
        resumed = (Path(config.hydra.runtime.output_dir) / "summary.json").is_file()
        plan.current = (time.perf_counter(), resumed)
        head = f"[run {plan.index}/{plan.total or '?'}] {config.hydra.job.override_dirname}"
        if resumed:
            print(f"{head}: finished earlier, kept", flush=True)
            return
        eta = plan.eta_s()
        tail = f"elapsed {_clock(time.perf_counter() - plan.started)}" + (f", ETA ~{_clock(eta)}" if eta else "")
        print(f"{head} | {tail}", flush=True)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        plan = PLAN
        if plan is None or plan.current is None:
            return
        start, resumed = plan.current
        if resumed:
            return
        took = time.perf_counter() - start
        plan.durations.append(took)
        done = job_return.return_value if job_return.status == JobStatus.COMPLETED else None
        summary = getattr(done, "summary", None)
        if isinstance(summary, dict):
            acc = summary.get("accuracy")
            acc_text = f"accuracy {acc:.0%}, " if isinstance(acc, float) else ""
            print(f"    done in {took:.0f}s: {acc_text}{summary.get('throughput_tok_s') or 0:.0f} tok/s, "
                  f"large-model share {summary.get('large_token_share') or 0:.0%}", flush=True)


# ---- phases ------------------------------------------------------------------------------------------------
@contextmanager
def _phase(name: str, phases: dict[str, float]) -> Iterator[None]:
    """Announce one phase and record its wall time in `phases`."""
    print(f"== demo: {name}", flush=True)
    start = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = round(time.perf_counter() - start, 1)
        print(f"== demo: {name} took {_clock(phases[name])}", flush=True)


def models_stamp(specs: list[Any]) -> str:
    """A short hash naming these models' exact weights: built-in models (the trained pair, tiny-random) record
    their recipe + seed in tokenrouter_build.json beside the member dir; others are named by their source.
    Resolving a `tiny:` source trains the pair first when it is missing (with progress bars)."""
    from tokenrouter.engine.loader import resolve_source

    parts = []
    for spec in specs:
        text = spec.source or spec.name
        if spec.engine != "sim":
            location = Path(resolve_source(spec.source).location)
            for candidate in (location / "tokenrouter_build.json", location.parent / "tokenrouter_build.json"):
                if candidate.is_file():
                    text += candidate.read_text()
                    break
        parts.append(text)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def ensure_router(models_name: str, stamp: str, algorithm: str, settings: Any, overrides: list[str]) -> Path:
    """The `algorithm` router for this pair (trained by `tokenrouter train-router` into the cache when missing)."""
    from tokenrouter.cache import cache_dir
    from tokenrouter.cli import train_router

    knobs = {k: settings[k] for k in ("problems", "epochs", "width")}
    key = hashlib.sha256(json.dumps([stamp, knobs, overrides], sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / "routers" / f"{models_name}-{key}" / algorithm
    router = out / "router.json"
    if router.is_file() and router.with_suffix(".safetensors").is_file():
        print(f"router: reusing {router}", flush=True)
        return router
    argv = ["--algorithm", algorithm, "--out", str(out), "--epochs", str(knobs["epochs"]), "--width",
            str(knobs["width"]), "+experiment=demo", *overrides, f"workload.num_problems={knobs['problems']}"]
    if train_router.run(argv) != 0 or not router.is_file():
        raise UserError(f"router training failed (tokenrouter train-router {' '.join(argv)})")
    return router


def router_figures(path: Path) -> dict[str, Any]:
    """Where a router is, its saved threshold and its held-out metrics from training."""
    doc = json.loads(path.read_text())
    figures = {k: v for k, v in doc.get("metrics", {}).items() if not (isinstance(v, list) and len(v) > 8)}
    return {"path": str(path), "threshold": doc.get("threshold"), **figures}  # quantiles stay in router.json


def step_latencies(specs: list[Any]) -> dict[str, dict[str, float]]:
    """Decode-step milliseconds of each model at batch 1 and 8 (`tokenrouter profile`'s measurement)."""
    from tokenrouter.engine.profiling import measure
    from tokenrouter.engine.torch_engine import TorchEngine

    out = {}
    for spec in specs:
        if spec.engine != "torch":
            continue
        engine = TorchEngine.from_spec(spec)
        try:
            decode_ms = measure(engine, [1, 8], [64], steps=20, extend_tokens=16).decode_ms
        finally:
            engine.close()
        out[spec.name] = decode_ms
        print(f"  {spec.name}: {decode_ms['1']:.2f} ms per step at batch 1, {decode_ms['8']:.2f} ms at batch 8",
              flush=True)
    return out


def sweep_points(overrides: list[str]) -> int:
    """How many runs one sweep's overrides make (the product of its comma lists)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    count = 1
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            count *= len(list(override.sweep_string_iterator()))
    return count


def first_point(overrides: list[str]) -> list[str]:
    """The sweep reduced to the first value of each comma list but the system's (what --smoke runs: every
    system a sweep compares, at one point)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for text, override in zip(overrides, OverridesParser.create().parse_overrides(overrides), strict=True):
        if override.is_sweep_override() and override.get_key_element() != "system":
            text = f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}"
        out.append(text)
    return out


def prepare_sweep_dir(sweep_dir: Path, stamp: dict[str, Any], fresh: bool) -> None:
    """Keep earlier runs only when they were made with the same models, router and overrides."""
    path = sweep_dir / STAMP_FILE
    if sweep_dir.exists() and any(sweep_dir.iterdir()):
        if not path.is_file():
            raise UserError(f"{sweep_dir} holds files that are not demo runs; choose another --sweep-dir")
        old = json.loads(path.read_text())
        if fresh or old != stamp:
            why = "--fresh" if fresh else "its runs were made with other models, router or overrides"
            print(f"discarding the earlier runs in {sweep_dir} ({why})", flush=True)
            shutil.rmtree(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(stamp, indent=2) + "\n")


def run_sweeps(sweeps: list[list[str]], common: list[str], sweep_dir: Path) -> list[str]:
    """Every sweep through `tokenrouter bench -m`; returns the sweeps that had failed runs."""
    global PLAN
    from tokenrouter.cli import bench

    PLAN = Plan(total=sum(sweep_points(s) for s in sweeps))
    print(f"{PLAN.total} runs in {len(sweeps)} sweeps into {sweep_dir}", flush=True)
    failed = []
    try:
        for sweep in sweeps:
            argv = ["-m", *common, *sweep, f"hydra.sweep.dir={sweep_dir}"]
            if bench.run(argv) != 0:
                failed.append(" ".join(sweep))
    finally:
        PLAN = None
    return failed


def remove_previous(out: Path) -> None:
    """Delete the files an earlier demo wrote to `out` (listed in its demo.json), so a report this run cannot
    make (e.g. query-level routing without RouteLLM) does not linger from another run."""
    try:
        names = json.loads((out / "demo.json").read_text()).get("files", [])
    except (OSError, ValueError):
        return
    for name in names:
        if isinstance(name, str) and "/" not in name:
            (out / name).unlink(missing_ok=True)


def write_report(sweep_dir: Path, out: Path, figures: dict[str, Any]) -> list[Path]:
    """The Pareto plot, query-level metrics, Table 3 (the configurations both TokenRouter and lock-step ran)
    and the summary table over all runs, what they left out; adds the measured comparisons to `figures`."""
    from tokenrouter.evals import demo_summary as ds
    from tokenrouter.evals import plots
    from tokenrouter.evals.html_report import write_html_report
    from tokenrouter.evals.left_out import collecting
    from tokenrouter.evals.machine import contended
    from tokenrouter.evals.report import query_level, table3, write_left_out
    from tokenrouter.evals.store import load_results
    from tokenrouter.evals.tables import to_markdown

    df = load_results([sweep_dir])
    out.mkdir(parents=True, exist_ok=True)
    remove_previous(out)
    df.to_csv(out / "runs.csv", index=False)
    with collecting() as notes:
        written = [out / "runs.csv", *plots.pareto_plot(df, out), *query_level(df, out), *table3(df, out)]
    written += write_left_out(notes, out)
    table = ds.summary_table(df)
    table.to_csv(out / "summary.csv", index=False)
    (out / "summary.md").write_text(f"Demo runs ({figures['workload']}, N={figures['N']}).\n\n{to_markdown(table)}\n")
    written += [out / "summary.csv", out / "summary.md", write_html_report(df, out)]
    figures.update(
        accuracy=ds.single_accuracies(df),
        lockstep=ds.throughput_ratios(ds.lockstep_pairs(df)),
        contended=contended(ds.lockstep_pairs(df)),  # over every comparison, the worst run per kind of reason
        frontier={axis: ds.dominance(df, axis).verdict for axis in AXES},
        frontier_points={axis: [ds.dominance(df, axis).dominated, ds.dominance(df, axis).query_points] for axis in AXES},
        near_large=ds.near_large(df),
    )
    return written


def output_dir(out: Path | None, smoke: bool) -> Path:
    """The report directory: `out`, else a fresh runs/demo/<UTC time>; refuses the committed reference."""
    if out is None:
        out = Path("runs/demo") / (time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + ("-smoke" if smoke else ""))
    resolved = out.expanduser().resolve()
    if resolved == REFERENCE_DIR or REFERENCE_DIR in resolved.parents:
        raise UserError(f"--out {out}: that is the committed reference ({REFERENCE_DIR}), which the demo never "
                        "overwrites; run into another directory and copy its report files over it on purpose")
    return out


def step_vs_reference(f: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, float]:
    """model -> this run's decode step at batch 1 over the committed reference's, when both measured the same
    model set."""
    if not reference or reference.get("models") != f.get("models"):
        return {}
    ref = reference.get("step_ms") or {}
    return {name: ms["1"] / ref[name]["1"] for name, ms in (f.get("step_ms") or {}).items()
            if name in ref and ref[name].get("1") and ms.get("1")}


def machine_lines(f: dict[str, Any], reference: dict[str, Any] | None) -> list[str]:
    """Why this run's throughput comparisons cannot be read as the systems' (empty when nothing is known
    against them): step times far from the committed reference's, runs measured on a contended machine."""
    from tokenrouter.evals.machine import STEP_RATIO

    lines = []
    ref = (reference or {}).get("step_ms") or {}
    for name, ratio in step_vs_reference(f, reference).items():
        mine, theirs = f["step_ms"][name]["1"], ref[name]["1"]
        if ratio > STEP_RATIO:
            lines.append(f"- **contended**: the {name} model's decode steps took {mine:.1f} ms at batch 1 against the "
                         f"committed reference's {theirs:.1f} ms ({ratio:.1f}x slower): this machine was busy or "
                         "slower, so the throughput ratios below say little about the systems")
        elif ratio < 1 / STEP_RATIO:
            lines.append(f"- the {name} model's decode steps took {mine:.1f} ms at batch 1 against the committed "
                         f"reference's {theirs:.1f} ms ({1 / ratio:.1f}x faster): a faster machine, whose figures are "
                         "not comparable with the reference's")
    busy = f.get("contended") or []
    if busy:
        lines.append("- **contended** while TokenRouter and lock-step were measured: " + "; ".join(busy) +
                     " (summary.json `machine` of each run): their ratios below measure the machine as much as the "
                     "systems")
    return lines


def ratio_line(r: dict[str, Any]) -> str:
    """One TokenRouter / lock-step comparison: both throughputs, the ratio, its interval over repeats (with
    each repeat's ratio), and whether the machine was contended."""
    from tokenrouter.evals.headline import interval_text

    repeats = r.get("ratio per repeat") or []
    spread = interval_text(repeats)
    repeat_text = f" ({spread}; per repeat: {', '.join(f'{x:.2f}x' for x in repeats)})" if spread else ""
    text = (f"- TokenRouter vs lock-step ({r['algorithm']} {r['settings']}, N={r['N']}): "
            f"{r['tokenrouter tok/s']:.1f} vs {r['lockstep tok/s']:.1f} tok/s = {r['ratio']:.2f}x{repeat_text}")
    if r.get("contended"):
        text += " -- contended, not a measure of the systems"
    return text


def closing_note(f: dict[str, Any], files: list[str], reference: dict[str, Any] | None = None) -> str:
    """demo.md: the measured figures in a few lines (also printed at the end), opening with why its
    comparisons cannot be trusted where the machine says so."""
    seeds = f" x {f['repeats']} seeds" if f.get("repeats", 1) > 1 else ""
    lines = [f"# TokenRouter demo: models={f['models']} on {f['workload']} ({f['problems']} problems{seeds}), N={f['N']}",
             ""]
    warnings = machine_lines(f, reference)
    if warnings:
        lines += [*warnings, ""]
    for name, acc in f["accuracy"].items():
        lat = f["step_ms"].get(name, {})
        lat_text = f"; decode step {lat['1']:.2f} ms at batch 1, {lat['8']:.2f} ms at batch 8" if lat else ""
        lines.append(f"- {name} model alone: accuracy {acc['accuracy']:.1%} "
                     f"(95% CI {acc['ci95'][0]:.0%}-{acc['ci95'][1]:.0%}){lat_text}")
    ms = f["step_ms"]
    if len(ms) == 2:
        (a, la), (b, lb) = ms.items()
        lines.append(f"- step latency ratio {b}/{a} at batch 1: {lb['1'] / la['1']:.1f}x")
    for alg, r in f["routers"].items():
        auc = r.get("heldout_auc")
        auc_text = f"held-out AUC {auc:.3f}" if auc is not None else "held-out AUC not defined (one class held out)"
        lines.append(f"- {alg} router: {auc_text} on mismatch labels, saved threshold {r.get('threshold'):.3f}")
    if not f["lockstep"]:
        lines.append("- TokenRouter vs lock-step: no lock-step run with a TokenRouter twin was measured")
    lines += [ratio_line(r) for r in f["lockstep"]]
    if f.get("near_large"):
        lines.append(f"- closest to the large model alone: {f['near_large']}")
    if f.get("query_level_note"):
        lines.append(f"- query-level routing: {f['query_level_note']}")
    for axis, verdict in f["frontier"].items():
        lines.append(f"- frontier (accuracy vs {axis}): {verdict}")
    lines.append("- wall time per phase: " + ", ".join(f"{k} {_clock(v)}" for k, v in f["phases"].items()))
    if f.get("failed"):
        lines.append(f"- sweeps with failed runs: {f['failed']}")
    if reference is not None:
        lines += ["", f"## This run against the committed reference ({REFERENCE_DIR.name})", "",
                  *comparison_lines(f, reference)]
    lines += ["", "Files: " + ", ".join(files), ""]
    pareto = [n for n in files if n.startswith("pareto_") and n.endswith(".png")]
    lines += [f"![Pareto]({n})" for n in pareto]
    return "\n".join(lines) + "\n"


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if any(o.startswith("-") for o in args.overrides):
        raise UserError(f"unknown option {next(o for o in args.overrides if o.startswith('-'))!r}")
    from tokenrouter.cli.hydra_config import compose
    from tokenrouter.config import model_specs

    start = time.perf_counter()
    demo = compose(["+experiment=demo", *args.overrides]).demo
    overrides = list(args.overrides)
    router_settings = dict(demo.routers)
    sweeps = [list(s) for s in demo.sweeps]
    seed_axis = f"seed={demo.seeds}"  # every point once per repeat
    if args.smoke:
        seed_axis = first_point([seed_axis])[0]
        overrides = [*demo.smoke.overrides, *overrides]
        router_settings.update(demo.smoke.routers)
        sweeps = [first_point(s) for s in sweeps]
    cfg = compose(["+experiment=demo", *overrides])
    out = output_dir(args.out, args.smoke)
    sweep_dir = args.sweep_dir or out / "sweeps"
    query_note = None
    if importlib.util.find_spec("routellm") is None:
        query_note = "skipped: RouteLLM is not installed (`pip install -e .[routellm]` adds it)"
        sweeps = [s for s in sweeps if "system=query_routing" not in s]
        print(f"query-level routing {query_note}", flush=True)

    phases: dict[str, float] = {}
    specs = model_specs(cfg.models)
    with _phase("model pair", phases):
        stamp = models_stamp(specs)
    with _phase("routers", phases):
        routers = {alg: ensure_router(str(cfg.models.name), stamp, alg, router_settings, overrides)
                   for alg in router_settings["algorithms"]}
    reference = load_reference()
    with _phase("step latency", phases):
        step_ms = step_latencies(specs)
        for line in machine_lines({"models": str(cfg.models.name), "step_ms": step_ms}, reference):
            print(line.removeprefix("- ").replace("**", ""), flush=True)  # now, not after the sweeps
    common = ["+experiment=demo", *overrides, *(f"++models.routers.{alg}={path}" for alg, path in routers.items())]
    with _phase("sweeps", phases):
        prepare_sweep_dir(sweep_dir, {"models": stamp, "routers": {a: str(p) for a, p in routers.items()},
                                      "overrides": overrides, "sweeps": sweeps}, args.fresh)
        failed = run_sweeps([[*s, seed_axis] for s in sweeps], common, sweep_dir)
    figures: dict[str, Any] = {
        "models": str(cfg.models.name), "workload": str(cfg.workload.name), "N": int(cfg.concurrency),
        "problems": int(cfg.workload.get("limit") or cfg.workload.get("num_problems") or 0),
        "repeats": sweep_points([seed_axis]),
        "step_ms": step_ms,
        "routers": {alg: router_figures(path) for alg, path in routers.items()},
        "query_level_note": query_note, "failed": failed, "sweep_dir": str(sweep_dir), "phases": phases,
    }
    with _phase("report", phases):
        written = write_report(sweep_dir, out, figures)
    phases["total"] = round(time.perf_counter() - start, 1)
    written += [out / "demo.json", out / "demo.md"]
    figures["files"] = [p.name for p in written]
    figures["step_vs_reference"] = step_vs_reference(figures, reference)
    atomic_write_text(out / "demo.json", json.dumps(figures, indent=2, default=str) + "\n")
    note = closing_note(figures, figures["files"], reference)
    (out / "demo.md").write_text(note)
    print(note)
    print(f"wrote {len(written)} files to {out}/ (runs in {sweep_dir}/)")
    return 1 if failed else 0
