"""Models are fetched in the bench / serve process before any subserver starts; local ones need nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenrouter.engine.download import download
from tokenrouter.engine.loader import resolve_source


def test_local_and_built_in_sources_skip_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def no_hub(*args: object, **kwargs: object) -> None:
        raise AssertionError("a local model must not touch the Hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_hub)
    download("tiny-random:small")
    download(resolve_source("tiny-random:large").location)  # a local directory


def test_hub_id_without_network_is_one_line_quickly(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PYTHONPATH": os.getcwd()}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tokenrouter", "generate", "--model", "Qwen/Qwen3-0.6B",
                           "--prompt", "hi"], env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - start < 60
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot download model 'Qwen/Qwen3-0.6B' from the Hugging Face Hub" in lines[0]
