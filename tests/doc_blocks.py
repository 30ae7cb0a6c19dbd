"""Run what a documentation page tells a user to type: its fenced blocks in order, as a user would, in a fresh
directory. A ```sh (or ```bash) block's lines run in a shell (`cd DIR` carries over to the next line); a ```yaml / ```python
block whose first line is `# PATH` is written to PATH; other blocks (a pyproject snippet) are read, not run.
Each command is printed (pytest -s lists them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def section(path: Path, heading: str | None = None) -> str:
    """A Markdown page's text, or the part under `## heading` up to the next `## `."""
    text = path.read_text()
    if heading is None:
        return text
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def commands(body: str) -> list[str]:
    """A shell block's lines without comments and blank lines, a command continued over lines (a trailing
    backslash, as the docs wrap long commands) joined into one."""
    out: list[str] = []
    continued = False
    for ln in body.splitlines():
        text = ln.strip()
        if not continued and (not text or text.startswith("#")):
            continue
        if continued:
            out[-1] += " " + text.removesuffix("\\").rstrip()
        else:
            out.append(text.removesuffix("\\").rstrip())
        continued = text.endswith("\\")
    return out


def first_shell_block(text: str) -> list[str]:
    """The commands of the first ```sh block in `text`."""
    found = [body for language, body in blocks(text) if language == "sh"]
    assert found, "no ```sh block"
    return commands(found[0])


def user_env() -> dict[str, str]:
    """The environment of a user whose PATH starts with this venv's bin (its `tokenrouter`)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def pip_into(site: Path):
    """A command rewrite for run_page: the page's `pip install X` goes into folder `site` (put on PYTHONPATH),
    with this interpreter and no dependencies, so the test's venv is left as it was."""
    def rewrite(line: str) -> str:
        if line.startswith("pip install "):
            return (f"{sys.executable} -m pip install -q --no-deps --no-build-isolation --target {site} "
                    + line.removeprefix("pip install ").split("#")[0].strip())
        return line

    return rewrite


def run_page(text: str, cwd: Path, env: dict[str, str] | None = None,
             rewrite: Callable[[str], str] = lambda line: line, timeout: float = 300) -> dict[str, str]:
    """Run the blocks of `text` from `cwd`; returns each command as run -> what it printed on stdout. `rewrite`
    maps a line before it runs (e.g. a `pip install` into a target folder instead of the test's own venv)."""
    env = env or user_env()
    ran: dict[str, str] = {}
    for language, body in blocks(text):
        first = body.splitlines()[0] if body else ""
        if language in ("sh", "bash"):
            for line in commands(body):
                line = rewrite(line)
                print(f"$ {line}")
                ran[line] = ""
                if line.startswith("cd "):
                    cwd = (cwd / line[3:].strip()).resolve()
                    continue
                done = subprocess.run(line, shell=True, cwd=cwd, env=env, capture_output=True, text=True,
                                      timeout=timeout)
                assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
                ran[line] = done.stdout
        elif language in ("yaml", "python") and re.fullmatch(r"# [\w./-]+\.(yaml|py)", first):
            target = cwd / first[2:].strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
            print(f"(wrote {target.relative_to(cwd)})")
    return ran
