"""Hydra launchers and sweepers for `tokenrouter bench -m`: the resolvers their configs use
(conf/hydra/launcher/*.yaml, conf/hydra/sweeper/optuna_pareto.yaml) and the checks made before a sweep
starts, so a missing plugin, a bad objective or a request no local machine can meet is one line (exit 2)
rather than a traceback from inside the plugin or a Ray task waiting forever for CPUs that do not exist."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import warnings
from typing import Any

from tokenrouter.cli.job_resources import JobResources
from tokenrouter.errors import UserError

# plugin package -> (distribution, `pip install 'tokenrouter[EXTRA]'`)
PLUGINS = {
    "hydra_plugins.hydra_ray_launcher": ("hydra-ray-launcher", "ray"),
    "hydra_plugins.hydra_submitit_launcher": ("hydra-submitit-launcher", "submitit"),
    "hydra_plugins.hydra_optuna_sweeper": ("hydra-optuna-sweeper", "optuna"),
    "hydra_plugins.hydra_joblib_launcher": ("hydra-joblib-launcher", None),
}
RAY_LAUNCHER = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
OPTUNA_SWEEPER = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def register_resolvers() -> None:
    """`${tokenrouter.gpus|cpus|mem_gb|local_jobs:${models.members}}` and `${tokenrouter.maximize:${objective}}`
    (idempotent: every command composing configs calls it)."""
    from omegaconf import OmegaConf

    from tokenrouter.evals.objective import directions

    resolvers = {
        "tokenrouter.gpus": lambda members: JobResources.of_members(members).gpus,
        "tokenrouter.cpus": lambda members: JobResources.of_members(members).cpus,
        "tokenrouter.mem_gb": lambda members: JobResources.of_members(members).mem_gb,
        "tokenrouter.local_jobs": lambda members: JobResources.of_members(members).local_jobs(),
        "tokenrouter.maximize": directions,
    }
    for name, fn in resolvers.items():
        OmegaConf.register_new_resolver(name, fn, replace=True)


def quiet_schema_matching() -> None:
    """conf/hydra/launcher/*.yaml are complete launcher configs named like the plugins' own, so that
    `hydra/launcher=ray` picks ours. Hydra 1.3 still validates them against the plugin's schema of that name
    (which we want: a typo in a launcher setting is refused) and warns that it will stop doing so; after that
    they simply replace the plugin's. The warning is noise to a user either way."""
    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/\w+' is validated against ConfigStore schema",
                            category=UserWarning)


def check(cfg: Any) -> None:
    """Refuse a sweep that cannot start: plugin not installed, bad objective, Optuna without an objective, a
    local Ray cluster smaller than one run. `cfg` is the composed config with its `hydra` node."""
    from omegaconf import OmegaConf

    from tokenrouter.evals.objective import objective_names

    launcher, sweeper = cfg.hydra.launcher, cfg.hydra.sweeper
    choices = cfg.hydra.runtime.choices
    _installed(str(launcher.get("_target_")), f"hydra/launcher={choices.get('hydra/launcher')}")
    _installed(str(sweeper.get("_target_")), f"hydra/sweeper={choices.get('hydra/sweeper')}")
    if cfg.get("objective") is not None:
        names = objective_names(cfg.objective)
        if sweeper.get("_target_") == OPTUNA_SWEEPER:
            _maximised(sweeper.direction, names)
    elif sweeper.get("_target_") == OPTUNA_SWEEPER:
        raise UserError("hydra/sweeper=optuna needs the values to optimise: objective=[NAME,...] "
                        "(e.g. objective=[accuracy,throughput_tok_s], all maximised)")
    resolved = OmegaConf.to_container(launcher, resolve=True)  # a bad launcher setting fails here, as one line
    if launcher.get("_target_") == RAY_LAUNCHER:
        _fits_local_ray(resolved["ray"])
    if launcher.get("_target_") == SLURM_LAUNCHER and not (shutil.which("sbatch") and shutil.which("srun")):
        raise UserError("hydra/launcher=submitit_slurm: no SLURM here (sbatch / srun not on PATH); run the command "
                        "on a login node, or try the sweep on this machine with hydra/launcher=submitit_local")


def crashed_job_errors() -> tuple[type[BaseException], ...]:
    """What a launcher raises when a job could not be submitted or its process died rather than returned
    (Ray: the task failed after its retries; submitit: sbatch refused the array, or a job failed, timed out or
    was cancelled), reported in one line. Only launchers already imported count (evaluated in the `except`
    clause, after the launch imported them)."""
    errors: list[type[BaseException]] = []
    if "ray" in sys.modules:
        from ray.exceptions import RayError

        errors.append(RayError)
    if "submitit" in sys.modules:
        from submitit.core.utils import FailedSubmissionError, UncompletedJobError

        errors += [FailedSubmissionError, UncompletedJobError]  # UncompletedJobError: FailedJobError too
    return tuple(errors)


def _maximised(direction: Any, names: list[str]) -> None:
    """Optuna's directions must be one `maximize` per objective (the objective values are maximised)."""
    given = [direction] if isinstance(direction, str) or not hasattr(direction, "__len__") else list(direction)
    if [str(d).split(".")[-1] for d in given] != ["maximize"] * len(names):
        wanted = ",".join(["maximize"] * len(names))
        raise UserError(f"hydra/sweeper=optuna: objective {names} is maximised, so set "
                        f"hydra.sweeper.direction=[{wanted}] (got {[str(d) for d in given]})")


def _installed(target: str, choice: str) -> None:
    for package, (dist, extra) in PLUGINS.items():
        if target.startswith(package + ".") and importlib.util.find_spec(package) is None:
            how = f"pip install 'tokenrouter[{extra}]'" if extra else f"pip install {dist}"
            raise UserError(f"{choice} needs the Hydra plugin {dist}, which is not installed: {how}")


def _fits_local_ray(ray: dict[str, Any]) -> None:
    """When the Ray launcher starts its own cluster (no address, no $RAY_ADDRESS), one run must fit this
    machine, else its task would wait for resources that never come. A cluster is not checked: its autoscaler
    may still add nodes."""
    init, remote = ray.get("init") or {}, ray.get("remote") or {}
    if init.get("address") is not None or os.environ.get("RAY_ADDRESS"):
        return
    cores = init.get("num_cpus") or os.cpu_count() or 1
    if (remote.get("num_cpus") or 0) > cores:
        raise UserError(f"one run asks Ray for {remote['num_cpus']} CPUs but the local Ray cluster has {cores}: "
                        "lower hydra.launcher.ray.remote.num_cpus, or join a cluster with "
                        "hydra.launcher.ray.init.address=auto (or ray://HOST:10001)")
    if remote.get("num_gpus"):
        import torch

        have = init.get("num_gpus") or torch.cuda.device_count()
        if remote["num_gpus"] > have:
            raise UserError(f"one run asks Ray for {remote['num_gpus']} GPUs but the local Ray cluster has {have}: "
                            "join a cluster with hydra.launcher.ray.init.address=auto (or ray://HOST:10001)")
