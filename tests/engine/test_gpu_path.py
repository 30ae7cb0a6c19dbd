"""The GPU path's decisions, as pure functions of device facts, checked on CPU against the dependencies' own code
(issue 35): TP placement for transformers 5.x, Hub models loaded from their cached snapshot (no Hub lookups, EOS
ids for the sglang engine), SGLang's KV sizing, prefill graphs and decode-graph counting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tokenrouter.config import ModelSpec
from tokenrouter.engine import loader
from tokenrouter.engine.placement import rank_device, rank_env
from tokenrouter.engine.sglang_args import (
    PLANNED_MEM_FRACTION,
    TP_BALANCE_ENV,
    decode_graph_replay,
    engine_server_args,
    eos_ids,
    kv_sizing,
    server_env,
    server_kv_flags,
)
from tokenrouter.errors import UserError

# -- fault 1: torch-engine TP on CUDA -----------------------------------------------------------------------------


def test_tp_placement_passes_no_device_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' own prepare_distribute_model refuses a device_map beside tensor parallelism; with what
    the loader passes it goes on to build the mesh (stubbed here: no second process, no GPU)."""
    from transformers.distributed import DistributedConfig, mixin

    with pytest.raises(ValueError, match="mutually exclusive"):  # what the loader passed before
        mixin.DistributedMixin.prepare_distribute_model(DistributedConfig(tp_plan="auto", tp_size=2),
                                                        device_map="cuda:0")
    meshes = []
    monkeypatch.setattr(mixin, "initialize_distributed_mesh", lambda cfg: meshes.append(cfg) or ("cuda:1", None))
    kwargs = loader.placement("cuda:0", 2)
    assert "device_map" not in kwargs
    mixin.DistributedMixin.prepare_distribute_model(kwargs["distributed_config"], device_map=kwargs.get("device_map"))
    assert meshes and meshes[0].tp_size == 2
    assert loader.placement("cuda:1", 1) == {"device_map": "cuda:1"} and loader.placement("cpu", 1) == {}


def test_each_rank_binds_its_own_gpu() -> None:
    """transformers binds a TP rank to cuda:$LOCAL_RANK: LOCAL_RANK is the rank's device index."""
    spec = ModelSpec(name="large", source="x", device="cuda:2", tp=2)
    devices = [rank_device(spec, r) for r in range(2)]
    assert devices == ["cuda:2", "cuda:3"]
    assert [rank_env(d) for d in devices] == [{"LOCAL_RANK": "2"}, {"LOCAL_RANK": "3"}]
    assert rank_env(rank_device(ModelSpec(name="m", source="x", device="cuda", tp=2), 1)) == {"LOCAL_RANK": "1"}
    assert rank_env("cpu") == {}


# -- faults 2 and 8: Hub models load from their cached snapshot ----------------------------------------------------


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache holding `org/tiny` (the tiny-random small model's files) as the Hub client lays it
    out, and a Hub endpoint that refuses every connection."""
    from tokenrouter.models.tiny_random import tiny_random_path

    cache = tmp_path / "hub"
    snapshot = cache / "models--org--tiny" / "snapshots" / "0123456789abcdef"
    shutil.copytree(tiny_random_path("small"), snapshot)
    (cache / "models--org--tiny" / "refs").mkdir()
    (cache / "models--org--tiny" / "refs" / "main").write_text("0123456789abcdef")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return snapshot


def test_cached_hub_model_loads_from_its_snapshot(hub_cache: Path) -> None:
    src = loader.loadable_source("org/tiny")
    assert src.is_local and Path(src.location) == hub_cache  # local_files_only=True from here on
    assert loader.local_dir("org/tiny") == str(hub_cache)
    config = loader.load_config("org/tiny")
    assert config.vocab_size > 0
    # the sglang engine's stop ids come from that snapshot: a Hub model stops at EOS like a local one
    assert eos_ids(loader.local_dir("org/tiny")) == eos_ids(str(hub_cache)) != ()
    # a Hub id not in the cache stays a Hub id for from_pretrained, and local_dir says to download it first
    assert not loader.loadable_source("org/other").is_local
    with pytest.raises(UserError, match="'org/other' is not in the Hugging Face cache"):
        loader.local_dir("org/other")


# -- faults 5, 3 and 7: what SGLang is asked for --------------------------------------------------------------------


def test_sglang_kv_sizing_never_mixes_a_fraction_with_a_token_cap() -> None:
    unplanned = ModelSpec(name="m", source="x", engine="sglang", device="cuda:0", mem_fraction=0.8)
    assert kv_sizing(unplanned) == {"mem_fraction_static": 0.8}  # SGLang took min() with a 65,536-token cap
    assert server_kv_flags(unplanned) == ["--mem-fraction-static", "0.8"]
    planned = ModelSpec(name="m", source="x", engine="sglang", device="cuda:0", kv_tokens=300_000)
    assert kv_sizing(planned) == {"max_total_tokens": 300_000, "mem_fraction_static": PLANNED_MEM_FRACTION}
    assert kv_sizing(ModelSpec(name="m", source="x", engine="sglang", kv_tokens=512)) == {"max_total_tokens": 512}


def test_baseline_server_command_gets_the_same_kv_and_the_tp_balance_switch(tmp_path: Path) -> None:
    from tokenrouter.baselines.sglang_server import SGLangServerOptions, sglang_command

    py = tmp_path / "python"
    py.write_text("")
    opts = SGLangServerOptions(python=str(py))
    cmd, env = sglang_command(ModelSpec(name="l", source="x", device="cuda:0", tp=2, mem_fraction=0.8), "/m", 1, 0,
                              False, opts)
    assert "--max-total-tokens" not in cmd and cmd[cmd.index("--mem-fraction-static") + 1] == "0.8"
    assert env[TP_BALANCE_ENV] == "0"
    assert server_env(ModelSpec(name="s", source="x", device="cuda:0")) == {}


def test_engine_turns_prefill_graphs_off_and_counts_decode_replays_only() -> None:
    spec = ModelSpec(name="m", source="x", engine="sglang", device="cuda:1", kv_tokens=4096)
    args = engine_server_args(spec, "/models/m", 1, cuda_graph=True)
    assert args["disable_prefill_cuda_graph"] is True and args["disable_cuda_graph"] is False
    assert args["max_total_tokens"] == 4096 and args["base_gpu_id"] == 1 and args["device"] == "cuda"
    # a bounded request table (outside the KV pool) and SGLang's collectives bounded like ours
    assert args["max_running_requests"] == 512 and args["dist_timeout"] == 300
    cpu = engine_server_args(ModelSpec(name="m", source="x", engine="sglang"), "/m", 0, cuda_graph=False)
    assert cpu["attention_backend"] == "torch_native" and cpu["device"] == "cpu"
    assert [decode_graph_replay(d, g) for d, g in ((True, True), (False, True), (True, False))] == [True, False, False]


def test_every_engine_server_arg_is_a_field_of_sglangs_server_args() -> None:
    """Where SGLang is installed (make test-sglang), its ServerArgs takes every key we pass."""
    server_args = pytest.importorskip("sglang.srt.server_args")
    import msgspec

    fields = {f.name for f in msgspec.structs.fields(server_args.ServerArgs)}  # 0.5.23: a msgspec Struct
    spec = ModelSpec(name="m", source="x", engine="sglang", device="cuda:0", kv_tokens=4096)
    assert set(engine_server_args(spec, "/m", 0, cuda_graph=True)) <= fields


def test_driver_check_for_sglangs_cuda_13_pins() -> None:
    from tokenrouter.engine.sglang_args import driver_problem

    assert "needs an NVIDIA driver >= 580; this machine has 570.124.06" in driver_problem("13.0", "570.124.06")
    assert driver_problem("13.0", "580.65.06") is None and driver_problem("12.8", "550.54.15") is None
    assert driver_problem(None, "570.1") is None and driver_problem("13.0", None) is None  # CPU build / no nvidia-smi


# -- issue 32: the sglang engine's TP ranks ------------------------------------------------------------------------


def test_sglang_ranks_are_placed_as_sglangs_launcher_places_its_scheduler_processes() -> None:
    """Rank r of a model on cuda:K runs on GPU K + r with world rank r and ServerArgs.base_gpu_id K (SGLang's
    entrypoints/engine.py: gpu_id = base_gpu_id + tp_rank * gpu_id_step), the GPUs the memory plan gave it."""
    from tokenrouter.engine.sglang_args import RankPlacement, rank_placement

    spec = ModelSpec(name="l", source="x", engine="sglang", device="cuda:2", tp=2, kv_tokens=4096)
    assert [rank_placement(spec, r) for r in (0, 1)] == [RankPlacement(0, 2, 2), RankPlacement(1, 3, 2)]
    assert [rank_placement(spec, r).gpu_id for r in (0, 1)] == [int(rank_device(spec, r).split(":")[1]) for r in (0, 1)]
    args = engine_server_args(spec, "/m", rank_placement(spec, 1).base_gpu_id, cuda_graph=True)
    assert args["tp_size"] == 2 and args["base_gpu_id"] == 2
    assert server_env(spec) == {TP_BALANCE_ENV: "0"}  # rank 0 shares its GPU with the small model
    with pytest.raises(ValueError, match="outside tp=2"):
        rank_placement(spec, 2)


def test_an_sglang_rank_is_built_by_the_group_only() -> None:
    from tokenrouter.engine.sglang_engine import SGLangEngine

    with pytest.raises(UserError, match="group of rank processes; build it with"):
        SGLangEngine(ModelSpec(name="l", source="x", engine="sglang", device="cuda:0", tp=2, kv_tokens=64))
