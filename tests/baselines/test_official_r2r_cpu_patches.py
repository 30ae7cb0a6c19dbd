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


def test_kernel_stand_ins_import_any_name_and_raise_naming_it_when_called(tmp_path: Path) -> None:
    code = """
import sgl_kernel, sgl_kernel.kvcacheio as kv, vllm._custom_ops as ops
from sgl_kernel.allreduce import init_custom_ar  # a from-import of a CUDA-only name succeeds
for f in (kv.transfer_kv_all_layer, ops.rotary_embedding, init_custom_ar):
    try:
        f(1)
    except NotImplementedError as e:
        print(e)
print(sgl_kernel.__version__, hasattr(sgl_kernel, "__path__"), hasattr(ops, "__wrapped__"))
"""
    ran = _child(code, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "sgl_kernel.kvcacheio.transfer_kv_all_layer is a CUDA kernel: not available on CPU",
        "vllm._custom_ops.rotary_embedding is not available: tokenrouter's CPU stand-in was called",
        "sgl_kernel.allreduce.init_custom_ar is a CUDA kernel: not available on CPU",
        "0.3.8 True False"]
