"""The Makefile never changes the kind of an existing install: every target that installs this project into
the main venv asks pip for the kind already there (a README-style `pip install .` stays non-editable)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MAKEFILE = (Path(__file__).resolve().parents[1] / "Makefile").read_text()


def test_every_install_of_the_project_into_the_main_venv_keeps_its_kind() -> None:
    installs = [ln.strip() for ln in MAKEFILE.splitlines() if re.search(r'\$\(PY\) -m pip install .*"\.\[', ln)]
    assert len(installs) >= 4, installs  # the venv, test-browser, test-clients, test-launchers
    assert all('$$($(PY) -I -c "$$EDITABLE_OR_NOT")' in ln for ln in installs), installs


def test_the_kind_probe_answers_for_this_interpreter() -> None:
    snippet = re.search(r"export EDITABLE_OR_NOT := (.*?)\n\n", MAKEFILE, re.S).group(1)
    code = snippet.replace("\\\n", "\n").replace("$$", "$")
    code = "\n".join(line.strip() for line in code.splitlines())
    kind = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    shown = subprocess.run([sys.executable, "-I", "-m", "pip", "show", "tokenrouter"], capture_output=True, text=True)
    installed, editable = shown.returncode == 0, "Editable project location:" in shown.stdout
    assert kind.strip() == ("" if installed and not editable else "-e")  # pip's own answer
