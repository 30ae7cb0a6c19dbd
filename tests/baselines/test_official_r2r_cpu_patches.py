"""The CPU adaptations loaded into official R2R's processes (tokenrouter/baselines/official_r2r_cpu): the import-hook
mechanism, and the patches that need only torch and transformers, in real child processes (the SGLang / R2R
ones run in tests/baselines/test_official_r2r_cpu.py, from R2R's own environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenrouter.baselines.official_r2r_launch import CPU_SHIM

R2R_PYTHON = Path(__file__).resolve().parents[2] / ".venv-r2r" / "bin" / "python"  # make official-venv


def _child(code: str, tmp_path: Path, cpu: bool = True, python: str = sys.executable) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{CPU_SHIM}{os.pathsep}{tmp_path}", "TOKENROUTER_R2R_CPU": "1" if cpu else "0"}
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)


def test_hooks_run_before_and_after_the_module_and_only_for_watched_names(tmp_path: Path) -> None:
    (tmp_path / "watched.py").write_text("ANNOTATED: list[Placeholder] = []\nSTATE = 'loaded'\n")
    code = """
import r2r_cpu_patches as p, sys
p.BEFORE["watched"] = lambda m: m.__dict__.setdefault("Placeholder", int)
p.AFTER["watched"] = lambda m: setattr(m, "STATE", m.STATE + "+patched")
sys.meta_path.insert(0, p._HookFinder(p.BEFORE, p.AFTER))
import watched, json
print(watched.STATE)
"""
    out = _child(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["loaded+patched"]  # the NameError the placeholder prevents did not happen


def test_nccl_becomes_gloo_and_set_device_is_a_no_op(tmp_path: Path) -> None:
    code = """
import socket, torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
torch.cuda.set_device(3)
dist.init_process_group(backend="nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
print(dist.get_backend())
"""
    out = _child(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "gloo"
    off = _child("import torch, sys; sys.exit(0 if torch.cuda.set_device.__module__.startswith('torch') else 1)",
                 tmp_path, cpu=False)
    assert off.returncode == 0, off.stderr  # without TOKENROUTER_R2R_CPU=1 nothing is patched


@pytest.mark.parametrize("python", [
    pytest.param(sys.executable, id="ours"),
    pytest.param(str(R2R_PYTHON), id="r2r-env", marks=pytest.mark.skipif(
        not R2R_PYTHON.exists(), reason="R2R's environment (transformers 4.55) not built: make official-venv")),
])
def test_unknown_tokenizer_class_loads_as_the_fast_tokenizer_from_the_same_files(tmp_path: Path, python: str) -> None:
    pair = Path(__file__).resolve().parents[2] / "models" / "tiny-pair" / "small"
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text((pair / "tokenizer.json").read_text())
    config = json.loads((pair / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "NoSuchTokenizer"}))
    code = f"""
from transformers import AutoTokenizer, PreTrainedTokenizerFast
t = AutoTokenizer.from_pretrained({str(tok)!r})
print(isinstance(t, PreTrainedTokenizerFast), t.encode("12+34", add_special_tokens=False))
"""
    out = _child(code, tmp_path, python=python)
    assert out.returncode == 0, out.stderr
    fast, ids = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert fast == "True" and len(json.loads(ids)) == 5
