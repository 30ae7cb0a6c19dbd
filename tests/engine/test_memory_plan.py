"""The joint memory plan: SGLang-style fractions of TOTAL memory, made-up device sizes, real tiny configs."""

from __future__ import annotations

import pytest

from tokenrouter.config import ModelSpec
from tokenrouter.engine.memory_plan import (
    GIB,
    Demand,
    kv_bytes_per_token,
    plan_memory,
    plan_specs,
    weights_numel,
)
from tokenrouter.errors import UserError

GB80 = 80 * 10**9  # an "80 GB" GPU as sold


def test_fractions_of_total_memory_become_kv_bytes() -> None:
    small = Demand("small", ("cuda:0",), weights_bytes=1 * GIB, kv_bytes_per_token=100, mem_fraction=0.15)
    large = Demand("large", ("cuda:0",), weights_bytes=16 * GIB, kv_bytes_per_token=100, mem_fraction=0.8)
    kv = plan_memory([small, large], {"cuda:0": GB80})
    # independent of which model loads first: each gets its fraction of the total, minus its weights
    assert kv == {"small": int(0.15 * GB80) - GIB, "large": int(0.8 * GB80) - 16 * GIB}


def test_qwen3_0_6b_plus_32b_bf16_on_one_80gb_gpu_does_not_fit() -> None:
    small = Demand("small", ("cuda:0",), weights_bytes=2 * 751_632_384, kv_bytes_per_token=114_688,
                   mem_fraction=0.15)
    large = Demand("large", ("cuda:0",), weights_bytes=2 * 32_762_123_264, kv_bytes_per_token=262_144,
                   mem_fraction=0.8)
    with pytest.raises(UserError, match=r"model 'large' does not fit cuda:0: 61.0 GiB of weights exceed its "
                                        r"mem_fraction 0.8 of 74.5 GiB; give it its own device"):
        plan_memory([small, large], {"cuda:0": GB80})
    # the paper's placement: the large model over two GPUs (TP2), its rank 0 sharing GPU 0 with the small one
    tp2 = Demand("large", ("cuda:0", "cuda:1"), 32_762_123_264, 131_072, 0.8)
    kv = plan_memory([small, tp2], {"cuda:0": GB80, "cuda:1": GB80})
    assert kv["large"] == int(0.8 * GB80) - 32_762_123_264 > 0


def test_overcommitted_device_and_missing_device_are_one_line() -> None:
    a = Demand("a", ("cuda:0",), GIB, 10, 0.6)
    b = Demand("b", ("cuda:0",), GIB, 10, 0.6)
    with pytest.raises(UserError, match="mem_fractions sum to 1.20"):
        plan_memory([a, b], {"cuda:0": GB80})
    fixed = Demand("c", ("cuda:0",), 70 * GIB, 10, None, kv_bytes=GIB)
    with pytest.raises(UserError, match="fixed-size models need 71.0 GiB"):
        plan_memory([a, fixed], {"cuda:0": GB80})
    with pytest.raises(UserError, match=r"placed on cuda:1, which this machine does not have \(devices: cuda:0\)"):
        plan_memory([Demand("d", ("cuda:1",), GIB, 10, 0.5)], {"cuda:0": GB80})


def test_plan_specs_reads_tiny_configs_and_safetensors_headers() -> None:
    from tokenrouter.engine.loader import load_config, load_model, resolve_source

    for size in ("small", "large"):  # header count == the loaded model's (tied embeddings stored once)
        model = load_model(f"tiny-random:{size}")
        assert weights_numel(resolve_source(f"tiny-random:{size}").location) == sum(p.numel() for p in model.parameters())
    specs = [ModelSpec(name="small", source="tiny-random:small", device="cuda", mem_fraction=0.25),
             ModelSpec(name="large", source="tiny-random:large", device="cuda:0", dtype="bfloat16", tp=2,
                       mem_fraction=0.5),
             ModelSpec(name="fixed", source="tiny-random:small", device="cuda:1", kv_tokens=1000)]
    total = 64 * 2**20
    planned = plan_specs(specs, {"cuda:0": total, "cuda:1": total})
    large_numel = weights_numel(resolve_source("tiny-random:large").location)
    small_numel = weights_numel(resolve_source("tiny-random:small").location)
    assert planned[0].kv_bytes == int(0.25 * total) - 4 * small_numel and planned[0].mem_fraction is None
    assert planned[1].kv_bytes == int(0.5 * total) - 2 * large_numel // 2
    assert planned[2] == specs[2]  # a fixed KV size: checked for fit only
    cfg = load_config("tiny-random:large")
    assert kv_bytes_per_token(cfg, "bfloat16", 2) == 2 * 4 * (2 // 2) * 16 * 2
    with pytest.raises(UserError, match="models 'large', 'fixed' do not fit cuda:1"):
        plan_specs(specs, {"cuda:0": total, "cuda:1": 2**20})
    with pytest.raises(UserError, match="model 'large' does not fit cuda:1"):
        plan_specs(specs[:2], {"cuda:0": total, "cuda:1": 2**20})


def test_cpu_sets_are_not_planned() -> None:
    specs = [ModelSpec(name="small", source="tiny-random:small"), ModelSpec(name="s", engine="sim")]
    assert plan_specs(specs) is specs  # no CUDA model: the device's memory is not even asked for
