"""Where the Hydra configs live and how commands compose them: one place, so every command honours
$TOKENROUTER_CONF and reports a bad override as one line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tokenrouter.errors import UserError


def conf_dir() -> Path:
    """The Hydra config dir: $TOKENROUTER_CONF, else the package's `tokenrouter/conf` (in a checkout a link to
    the repository's conf/; in a wheel a copy of it, so a non-editable install works from any directory)."""
    env = os.environ.get("TOKENROUTER_CONF")
    path = Path(env) if env else Path(__file__).resolve().parents[1] / "conf"
    if not (path / "config.yaml").is_file():
        where = "TOKENROUTER_CONF" if env else "the installed package"
        raise UserError(f"no Hydra config found at {path}/config.yaml (set by {where}); "
                        "set TOKENROUTER_CONF to a dir holding config.yaml and its groups")
    return path


def hydra_one_line(exc: BaseException) -> str:
    """A Hydra / OmegaConf error as one line: its lines joined (they carry the valid options, e.g. "Available
    options in 'models': ..."), the config search path dump left out."""
    text = (str(exc).split("Config search path:")[0]).strip() or type(exc).__name__
    line = " ".join(ln.strip() for ln in text.splitlines() if ln.strip())
    return line if len(line) <= 400 else line[:397] + "..."


def compose(overrides: list[str], config_dir: Path | None = None, config_name: str = "config") -> Any:
    """The composed config (an OmegaConf DictConfig); Hydra's errors become one UserError line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from tokenrouter.cli.config_keys import algorithm_by_name, check_added_keys, explain_missing_key

    directory = (config_dir or conf_dir()).resolve()
    if not directory.is_dir():
        raise UserError(f"config directory not found: {directory}")
    def composed(given: list[str]) -> Any:
        return hydra_compose(config_name=config_name, overrides=given)

    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            overrides = algorithm_by_name(list(overrides))
            try:
                cfg = composed(overrides)
            except (HydraException, OmegaConfBaseException) as exc:
                raise UserError(f"config: {explain_missing_key(hydra_one_line(exc), overrides, composed)}") from None
            repository = GlobalHydra.instance().config_loader().repository
            check_added_keys(overrides, cfg, repository.group_exists)
            return cfg
    except (HydraException, OmegaConfBaseException) as exc:
        raise UserError(f"config: {hydra_one_line(exc)}") from None


def with_config_dirs(overrides: list[str], config_dirs: list[Path] | None) -> list[str]:
    """`--config-dir DIR` (repeatable) as Hydra's own mechanism, `hydra.searchpath`: the user's config groups
    (e.g. DIR/algorithm/entropy.yaml -> algorithm=entropy) beside the package's, without copying conf/."""
    if not config_dirs:
        return list(overrides)
    if any(o.split("=", 1)[0].lstrip("+~") == "hydra.searchpath" for o in overrides):
        raise UserError("give extra config dirs either as --config-dir or as hydra.searchpath=[...], not both")
    dirs = []
    for d in config_dirs:
        path = Path(d).expanduser().resolve()
        if not path.is_dir():
            raise UserError(f"--config-dir {d}: not a directory")
        dirs.append(f"file://{path}")
    return [*overrides, f"hydra.searchpath=[{','.join(dirs)}]"]
