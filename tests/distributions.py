"""An installed distribution without pip: a folder with modules and a `NAME-VERSION.dist-info` holding its
METADATA and entry_points.txt, which `importlib.metadata` finds on sys.path (or a subprocess's PYTHONPATH)
exactly as it finds a pip-installed one. Nothing is written to the test's own venv."""

from __future__ import annotations

from pathlib import Path


def fake_distribution(site: Path, name: str, version: str, entry_points: dict[str, dict[str, str]],
                      modules: dict[str, str] | None = None) -> Path:
    """Write distribution `name` into folder `site` (created): `entry_points` is group -> {name: "module:attr"},
    `modules` is file name -> source. Returns `site` (put it on sys.path / PYTHONPATH)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in names.items()) + "\n"
        for group, names in entry_points.items()))
    for file, text in (modules or {}).items():
        (site / file).write_text(text)
    return site
