"""`tokenrouter plan`: the joint memory plan of every job of a sweep, made offline from the footprints the model
sets record (no weights here), for a described node; an impossible setting is one line, exit 2."""

from __future__ import annotations

import pytest

from tokenrouter.cli import main
from tokenrouter.config import ModelSpec
from tokenrouter.engine.memory_plan import GIB, plan_specs


def test_table3_on_an_8_gpu_node(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "-m", "+experiment=table3", "--gpus", "8", "--gpu-memory-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan for 8 x 80 GiB GPUs: 8 job(s)") and out.rstrip().endswith("every job fits (8)")
    # the paper's placement on its engine: the 32B model's two SGLang ranks on cuda:0 and cuda:1, rank 0
    # beside the small model
    assert "large   sglang  cuda:0,cuda:1   bfloat16     30.51 GiB" in out
    assert "download first:" in out and "Qwen/Qwen3-32B 61.0 GiB" in out
    # the torch engine is one override away
    assert main(["plan", "models=qwen3-0.6b-32b", "models.engine=torch", "--gpus", "2", "--gpu-memory-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert "small   torch   cuda:0 " in out and "large   torch   cuda:0,cuda:1   bfloat16     30.51 GiB" in out


def test_pareto_sweep_and_impossible_settings(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "-m", "+experiment=pareto_amc23", "--gpus", "2", "--gpu-memory-gib", "80"]) == 0
    assert "every job fits (9)" in capsys.readouterr().out
    assert main(["plan", "models=qwen3-0.6b-32b", "--gpus", "1", "--gpu-memory-gib", "24"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tokenrouter plan: error: job 0 cannot run: model 'large' is placed on cuda:1, which this machine "
                   "does not have (devices: cuda:0)"]
    assert main(["plan", "models=qwen3-0.6b-32b", "models.engine=torch", "--gpus", "2", "--gpu-memory-gib", "24"]) == 2
    assert "model 'large' does not fit cuda:0: 30.5 GiB of weights" in capsys.readouterr().err
    assert main(["plan", "models=qwen3-0.6b-32b", "--gpus", "2", "--gpu-memory-gib", "24"]) == 2  # sglang: 3 GiB
    assert "model 'small' does not fit cuda:0: 1.4 GiB of weights and a 3.2 GiB reserve" in capsys.readouterr().err
    assert main(["plan", "models=qwen3-0.6b-32b"]) == 2  # no GPU here and none described
    assert "pass --gpus N --gpu-memory-gib G" in capsys.readouterr().err
    assert main(["plan", "--gpus", "2"]) == 2
    assert "go together" in capsys.readouterr().err


def test_models_on_disk_are_measured_and_sim_needs_nothing(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "models=tiny-random", "models.members.0.device=cuda:0", "+models.members.0.mem_fraction=0.5",
                 "--gpus", "1", "--gpu-memory-gib", "16"]) == 0
    assert "checkpoint" in capsys.readouterr().out
    assert main(["plan", "models=sim-r2r"]) == 0


def test_a_hub_model_not_on_disk_is_planned_from_its_footprint() -> None:
    footprint = {"params": 751_632_384, "layers": 28, "heads": 16, "kv_heads": 8, "head_dim": 128}
    spec = ModelSpec(name="small", source="Qwen/Qwen3-0.6B", dtype="bfloat16", device="cuda:0", mem_fraction=0.5,
                     footprint=footprint)
    (planned,) = plan_specs([spec], {"cuda:0": 16 * GIB})
    per_token = 2 * 28 * 8 * 128 * 2
    assert planned.kv_bytes is not None and planned.kv_bytes // per_token > 10_000
    with pytest.raises(Exception, match="records no footprint"):
        plan_specs([ModelSpec(name="x", source="Qwen/Qwen3-0.6B", device="cuda:0", mem_fraction=0.5)],
                   {"cuda:0": 16 * GIB})


def test_a_model_left_too_little_kv_is_warned(capsys: pytest.CaptureFixture) -> None:
    # the three-model set used to leave its 32B model ~1 GiB of KV at mem_fraction 0.8 of one GPU (torch
    # engine; SGLang's larger reserve for its CUDA graphs leaves none)
    assert main(["plan", "models=qwen3-0.6b-8b-32b", "models.engine=torch", "--gpus", "3", "--gpu-memory-gib", "79.6",
                 "models.members.2.mem_fraction=0.8", "workload.max_new_tokens=8192"]) == 0
    assert "warning: large's KV holds" in capsys.readouterr().out
    assert main(["plan", "models=qwen3-0.6b-8b-32b", "--gpus", "3", "--gpu-memory-gib", "79.6",
                 "models.members.2.mem_fraction=0.8"]) == 2
    assert "model 'large' does not fit cuda:2" in capsys.readouterr().err
    assert main(["plan", "models=qwen3-0.6b-8b-32b", "--gpus", "3", "--gpu-memory-gib", "79.6",
                 "workload.max_new_tokens=8192"]) == 0
    assert "warning" not in capsys.readouterr().out


def test_the_bench_plans_before_it_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same planner runs in the bench before anything starts: a set that cannot fit never downloads."""
    from tokenrouter.engine import download
    from tokenrouter.engine.factory import prepare_models
    from tokenrouter.errors import UserError

    fetched: list[str] = []
    monkeypatch.setattr(download, "download", fetched.append)
    footprint = {"params": 32_762_123_264, "layers": 64, "heads": 64, "kv_heads": 8, "head_dim": 128}
    spec = ModelSpec(name="large", source="Qwen/Qwen3-32B", dtype="bfloat16", device="cuda:0", mem_fraction=0.8,
                     footprint=footprint)
    with pytest.raises(UserError, match="placed on cuda:0, which this machine does not have"):
        prepare_models([spec])  # this machine has no GPU
    assert fetched == []


def test_all_at_once_plans_by_the_requests_in_flight(capsys: pytest.CaptureFixture) -> None:
    # AMC23's Pareto setting sends every request at t=0: the plan says how many of them the KV holds at once
    argv = ["plan", "+experiment=pareto_amc23_setup", "--gpus", "8", "--gpu-memory-gib", "80"]
    assert main(argv) == 0
    assert "note: small's KV holds 68,812 tokens: about 8 requests of 8,192 new tokens in flight" in capsys.readouterr().out
    assert main([*argv, "workload.limit=40"]) == 0
    assert "less than 40 in flight (all at once) x 8,192 new tokens: about 8 run at once" in capsys.readouterr().out
