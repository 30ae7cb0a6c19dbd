"""`tokenrouter bench [OVERRIDES...] [-m]`: one experiment run, or a Hydra multirun sweep (-m).

Runs Hydra in-process (its own API, not `@hydra.main`) so that a bad override or config is one line and exit
status 2 like every other command, and so tests can call `tokenrouter.cli.main(["bench", ...])`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobStatus

from tokenrouter.cli.args import ArgumentParser, flag_hint
from tokenrouter.cli.config_keys import algorithm_by_name, check_added_keys, explain_missing_key
from tokenrouter.cli.hydra_config import conf_dir, with_config_dirs
from tokenrouter.cli.hydra_config import hydra_one_line as _one_line
from tokenrouter.cli.launchers import (
    OPTUNA_SWEEPER,
    check,
    crashed_job_errors,
    quiet_schema_matching,
    register_resolvers,
)
from tokenrouter.errors import StorageError, UserError
from tokenrouter.evals.provenance import COMMAND_ENV
from tokenrouter.fsutil import atomic_write_text, locked_dir

HELP = "run an experiment (Hydra overrides; -m for a multirun sweep) and write a run dir"

DESCRIPTION = """\
Run one experiment (or, with -m, a sweep of them) of a serving system on a workload, configured with Hydra.
Each run writes into its run dir: config.yaml (resolved), requests.jsonl (one line per finished request,
written as it finishes) and summary.json (throughput, latency, TTFT, accuracy, token shares, thresholds).

examples:
  tokenrouter bench models=sim-r2r algorithm=bernoulli concurrency=4 hydra.run.dir=runs/one
  tokenrouter bench -m models=sim-r2r system=tokenrouter,lockstep concurrency=4,8
  tokenrouter bench -m +experiment=threshold_validation      # conf/experiment/*.yaml
  tokenrouter bench -m +experiment=concurrency_sweep hydra/launcher=joblib hydra.launcher.n_jobs=2

Config groups: models, algorithm, system, workload, experiment (see the list below). Top-level keys:
concurrency (closed-loop clients), arrival (closed_loop | all_at_once | poisson with request_rate=R per
second), seed, runtime.* (thresholds,
delayed_batching, ...), optional +sampling.temperature=... (greedy by default).

Sweeps: a sweep skips every run whose summary.json holds results of the same config (a damaged one is
rerun, with a warning; results of another config are refused, naming the keys that differ, unless
resume=rerun, which moves them to <point>/.superseded/), so rerunning the same command after a crash resumes
it; at the end its runs are collected into one table, <sweep dir>/results.csv (failed points included, with
their error). A run or sweep holds its directory while it runs: a second one into the same
directory is refused (exit 2). Experiments write to the fixed dir multirun/<experiment>/<point>; for your own sweeps pass
hydra.sweep.dir=DIR to make the dir stable. Hydra's launchers scale sweeps out, each run asking for what its
model set needs: hydra/launcher=joblib (local), ray (a local Ray, or hydra.launcher.ray.init.address=auto),
submitit_slurm / submitit_local; hydra/sweeper=optuna_pareto objective=[accuracy,throughput_tok_s] searches
instead of a grid (see conf/experiment/README.md).
Your own config groups (e.g. DIR/algorithm/mine.yaml -> algorithm=mine): --config-dir DIR (Hydra's
hydra.searchpath). Set TOKENROUTER_CONF=DIR to replace the whole config dir (default: the package's conf/)."""


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="tokenrouter bench", add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("-m", "--multirun", action="store_true", help="run a sweep (comma-separated values)")
    p.add_argument("--cfg", choices=("job", "hydra", "all"), help="print the composed config and exit")
    p.add_argument("--resolve", action="store_true", help="with --cfg: resolve interpolations")
    p.add_argument("-cd", "--config-dir", type=Path, action="append", default=None,
                   help="an extra config dir searched for config groups (repeatable; hydra.searchpath)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. models=sim-r2r concurrency=8")
    return p


def hydra_app(conf: Path):  # -> hydra._internal.hydra.Hydra
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()
    quiet_schema_matching()
    GlobalHydra.instance().clear()
    return Hydra.create_main_hydra2("bench", create_config_search_path(str(conf)))


def _print_help(hydra, overrides: list[str]) -> None:
    from hydra._internal.utils import get_args_parser

    print(f"usage: tokenrouter bench [-m] [--cfg job|hydra|all [--resolve]] [OVERRIDES...]\n\n{HELP}\n\n{DESCRIPTION}\n")
    print("== Hydra ==")
    args = get_args_parser().parse_args(overrides)
    hydra.app_help(config_name="config", args_parser=get_args_parser(), args=args)




@dataclass
class JobFailure:
    """What a failed run returns instead of raising, so Hydra prints no traceback banner and a sweep goes on.
    Plain data: with the joblib launcher it comes back from a worker process."""

    run_dir: str
    message: str
    bad_input: bool  # a UserError (exit 2) rather than a crashed system (exit 1)


def _task(cfg: Any) -> Any:
    from hydra.core.hydra_config import HydraConfig

    from tokenrouter.evals.bench import RunFailed
    from tokenrouter.evals.bench import run as run_one
    from tokenrouter.evals.objective import objective_names, objective_values

    register_resolvers()  # a launcher's worker process composes nothing itself
    try:
        outcome = run_one(cfg)
        if cfg.get("objective") is None:
            return JobDone(HydraConfig.get().runtime.output_dir, outcome.summary, outcome.skipped)
        return objective_values(outcome.summary, objective_names(cfg.objective))  # what a sweeper optimises
    except (UserError, RunFailed, StorageError) as exc:
        if HydraConfig.get().sweeper.get("_target_") == OPTUNA_SWEEPER:
            raise  # Optuna reads a raised error as a failed trial (a JobFailure would be "not a float") and
            # ends the search with it past max_failure_rate
        return JobFailure(HydraConfig.get().runtime.output_dir, str(exc), isinstance(exc, UserError))


@dataclass
class JobDone:
    """What a finished run returns: its summary, and whether it was kept from an earlier launch (skipped)."""

    run_dir: str
    summary: dict[str, Any]
    skipped: bool


def _returned(returns: Any) -> list[Any]:
    """The task's return values among Hydra's job returns (one JobReturn for a run, batches of them for a
    sweep; None from a sweeper that keeps them, e.g. Optuna, which logs its failed trials and raises past
    max_failure_rate). A job whose process raised has no return value."""
    if returns is None:
        return []
    items = returns if isinstance(returns, list) else [[returns]]
    return [r.return_value for batch in items for r in batch if r.status == JobStatus.COMPLETED]


def _failures(returns: Any) -> list[JobFailure]:
    return [r for r in _returned(returns) if isinstance(r, JobFailure)]


def _skipped(returns: Any) -> list[str]:
    return [r.run_dir for r in _returned(returns) if isinstance(r, JobDone) and r.skipped]


SHOWN = ("status", "system", "algorithm", "models", "concurrency", "request_rate", "throughput_tok_s",
         "predicted_throughput_tok_s", "accuracy", "mean_latency_s", "run_dir")


def output_dir(hydra: Any, overrides: list[str], multirun: bool) -> Path:
    """The directory a run (`hydra.run.dir`) or sweep (`hydra.sweep.dir`) writes, resolved against the whole
    composed config, as Hydra's launcher does: experiment configs interpolate `${experiment_name}` into it."""
    return _output_dir(_compose(hydra, overrides, multirun), multirun)


def _compose(hydra: Any, overrides: list[str], multirun: bool) -> Any:
    from hydra.types import RunMode

    return hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN if multirun else RunMode.RUN)


def _output_dir(cfg: Any, multirun: bool) -> Path:
    return Path(str(cfg.hydra.sweep.dir if multirun else cfg.hydra.run.dir)).resolve()


def _pin(key: str, value: str | Path) -> str:
    """An override fixing `key` to `value`, quoted (a comma in a path must not start a sweep) and with `${`
    escaped (a command line's own interpolations stay text)."""
    return f"{key}='" + str(value).replace("'", "\\'").replace("${", "\\${") + "'"


def launch(hydra: Any, overrides: list[str], multirun: bool, task: Callable[[Any], Any],
           command: list[str] | None = None) -> tuple[Any, bool]:
    """Run the job (or sweep, then collect it; returns Hydra's returns and whether the sweep's table was written) holding its output dir for the whole time, and pinned to the
    dir that was locked (a `${now:...}` default would otherwise resolve again, maybe to another second).
    Results are collected from the run dirs on disk, not from the launcher's returns: the same table whatever
    order runs finished in, on whichever hosts, and also for sweepers that return nothing (Optuna).
    `command` goes to every job's environment (Hydra's hydra.job.env_set travels with the job to any
    launcher's worker), so summary.json's provenance names the user's command, not the worker's."""
    cfg = _compose(hydra, overrides, multirun)
    check_added_keys(overrides, cfg, hydra.config_loader.repository.group_exists)
    check(cfg)
    directory = _output_dir(cfg, multirun)
    with locked_dir(directory, "sweep directory" if multirun else "run directory"):
        pinned = [*overrides, _pin("hydra.sweep.dir" if multirun else "hydra.run.dir", directory)]
        if command is not None:
            pinned.append(_pin(f"+hydra.job.env_set.{COMMAND_ENV}", json.dumps(command)))
        if not multirun:
            return hydra.run(config_name="config", task_function=task, overrides=pinned), True
        returns = hydra.multirun(config_name="config", task_function=task, overrides=pinned)
        written = True
        if returns is None or (returns and returns[0]):
            written = collect(directory, _failures(returns), _skipped(returns))
        return returns, written


def collect(sweep_dir: Path, failures: list[JobFailure] | None = None, skipped: list[str] | None = None) -> bool:
    """The sweep's runs as one table: results.csv in the sweep dir, and the main columns printed. A point that
    failed this time is a row of its own (status "failed", with the error) in place of whatever its dir still
    holds (results of another config that were refused, or that could not be moved aside), so the table says
    what is missing and why; every other row is labelled from its own summary's config record. The last line
    counts the points: ok (run now), skipped (finished earlier, kept) and failed. A table that cannot be
    written (disk full) is one line; rerunning the command writes it, every finished point being skipped."""
    import pandas as pd

    from tokenrouter.evals.runs_table import system_label
    from tokenrouter.evals.store import load_results

    errors = {str(Path(f.run_dir).resolve()): f.message for f in failures or []}
    try:
        table = load_results([sweep_dir])
        table = table[~table["run_dir"].isin(errors)]
    except UserError as exc:  # no run finished
        if not failures:
            print(f"tokenrouter bench: no results to collect in {sweep_dir}: {exc}", file=sys.stderr)
            return True
        table = pd.DataFrame({"run_dir": pd.Series(dtype=object), "status": pd.Series(dtype=object)})
    failed = [{"run_dir": d, "status": "failed", "error": m} for d, m in errors.items()]
    if failed:
        table = pd.concat([table, pd.DataFrame(failed)], ignore_index=True)
    shown = table[[c for c in SHOWN if c in table.columns]].dropna(axis=1, how="all")  # e.g. no request_rate
    if "system" in shown:  # a single-model run says which model: `single (large: Qwen/Qwen3-8B)`
        shown = shown.assign(system=[system_label(r) if r.get("status") != "failed" else r.get("system")
                                     for _, r in table.iterrows()])
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    kept = {str(Path(d).resolve()) for d in skipped or []} - set(errors)
    ok = len(table) - len(failed)
    counts = f"{ok - len(kept)} ok, {len(kept)} skipped (finished earlier), {len(failed)} failed"
    try:
        atomic_write_text(sweep_dir / "results.csv", table.to_csv(index=False))
    except StorageError as exc:
        print(f"tokenrouter bench: {counts}; results table not written: {exc} (rerun the same command once "
              "there is space: finished points are kept and the table is written then)", file=sys.stderr)
        return False
    print(f"{counts} -> {sweep_dir / 'results.csv'}")
    return True


def run(argv: list[str]) -> int:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from tokenrouter.evals.bench import RunFailed

    args = _parser().parse_intermixed_args(argv)
    bad = [o for o in args.overrides if o.startswith("-")]
    if bad:
        raise UserError(flag_hint(f"unknown option {bad[0]!r} (see `tokenrouter bench --help`)"))
    args.overrides = algorithm_by_name(with_config_dirs(args.overrides, args.config_dir))
    hydra = hydra_app(conf_dir())
    try:
        if args.help:
            _print_help(hydra, args.overrides)
            return 0
        if args.cfg:
            hydra.show_cfg(config_name="config", overrides=args.overrides, cfg_type=args.cfg, package=None,
                           resolve=args.resolve)
            return 0
        returns, table_written = launch(hydra, args.overrides, args.multirun, _task,
                                        ["tokenrouter", "bench", *argv])
    except (HydraException, OmegaConfBaseException) as exc:
        compose = lambda rest: _compose(hydra, rest, args.multirun)  # noqa: E731
        raise UserError(explain_missing_key(_one_line(exc), args.overrides, compose)) from None
    except RunFailed as exc:  # a failed Optuna trial, past the sweeper's max_failure_rate
        print(f"tokenrouter bench: run failed: {exc}", file=sys.stderr)
        return 1
    except crashed_job_errors() as exc:
        print(f"tokenrouter bench: the launcher failed: {_one_line(exc)} (finished runs are kept: rerun the "
              "command to resume)", file=sys.stderr)
        return 1
    finally:
        GlobalHydra.instance().clear()
    failures = _failures(returns)
    if not args.multirun and failures and failures[0].bad_input:
        raise UserError(failures[0].message)
    for f in failures:
        print(f"tokenrouter bench: run failed ({f.run_dir}): {f.message}", file=sys.stderr)
    if failures:
        return 2 if all(f.bad_input for f in failures) else 1
    return 0 if table_written else 1
