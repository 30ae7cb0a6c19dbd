"""The joint memory plan: SGLang-style fractions of TOTAL memory, made-up device sizes, real tiny configs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenrouter.config import ModelSpec
from tokenrouter.engine.memory_plan import (
    GIB,
    Demand,
    kv_bytes_per_token,
    plan_memory,
    plan_specs,
    reserve_bytes,
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
    with pytest.raises(UserError, match=r"model 'large' does not fit cuda:0: 61.0 GiB of weights and a 0.0 GiB "
                                        r"reserve exceed its mem_fraction 0.8 of 74.5 GiB; give it its own device"):
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
    total = 16 * GIB
    planned = plan_specs(specs, {"cuda:0": total, "cuda:1": total})
    large_numel = weights_numel(resolve_source("tiny-random:large").location)
    small_numel = weights_numel(resolve_source("tiny-random:small").location)
    layers = {n: int(load_config(f"tiny-random:{n}").num_hidden_layers) for n in ("small", "large")}
    # each: its fraction of the total, minus its weights and its reserve, shared with one layer's K/V gather
    assert planned[0].kv_bytes == int((int(0.25 * total) - 4 * small_numel - reserve_bytes("torch", 1))
                                      / (1 + 1 / layers["small"]))
    assert planned[0].mem_fraction is None
    assert planned[1].kv_bytes == int((int(0.5 * total) - 2 * large_numel // 2 - reserve_bytes("torch", 2))
                                      / (1 + 1 / layers["large"]))
    assert planned[2] == specs[2]  # a fixed KV size: checked for fit only
    cfg = load_config("tiny-random:large")
    assert kv_bytes_per_token(cfg, "bfloat16", 2) == 2 * 4 * (2 // 2) * 16 * 2
    with pytest.raises(UserError, match="models 'large', 'fixed' do not fit cuda:1"):
        plan_specs(specs, {"cuda:0": total, "cuda:1": 2 * GIB})
    with pytest.raises(UserError, match="model 'large' does not fit cuda:1"):
        plan_specs(specs[:2], {"cuda:0": total, "cuda:1": 2 * GIB})


def test_sglang_models_get_planned_tokens_not_a_fraction_of_free_memory() -> None:
    """SGLang measures mem_fraction_static against the memory free when its runner starts, so two models
    starting together on one GPU would split it by start order: the plan gives it an absolute token count."""
    from tokenrouter.engine.loader import load_config, resolve_source

    specs = [ModelSpec(name="small", source="tiny-random:small", engine="sglang", device="cuda:0", mem_fraction=0.3),
             ModelSpec(name="large", source="tiny-random:large", engine="sglang", device="cuda:0", mem_fraction=0.6)]
    total = 32 * GIB
    planned = plan_specs(specs, {"cuda:0": total})
    for spec, fraction, size in zip(planned, (0.3, 0.6), ("small", "large"), strict=True):
        numel = weights_numel(resolve_source(f"tiny-random:{size}").location)
        per_token = kv_bytes_per_token(load_config(f"tiny-random:{size}"), "float32")
        room = int(fraction * total) - 4 * numel - reserve_bytes("sglang", 1)  # no gather term: SGLang's kernels
        assert spec.mem_fraction is None and spec.kv_tokens == room // per_token and spec.kv_bytes is None
    assert plan_specs(list(reversed(specs)), {"cuda:0": total}) == list(reversed(planned))  # order-free


def test_reserve_and_gather_overhead_come_out_of_the_fraction() -> None:
    d = Demand("m", ("cuda:0",), weights_bytes=10 * GIB, kv_bytes_per_token=1, mem_fraction=0.5,
               reserve_bytes=2 * GIB, kv_overhead=0.25)
    assert plan_memory([d], {"cuda:0": 40 * GIB}) == {"m": int((20 - 10 - 2) * GIB / 1.25)}
    with pytest.raises(UserError, match="10.0 GiB of weights and a 11.0 GiB reserve exceed"):
        plan_memory([replace(d, reserve_bytes=11 * GIB)], {"cuda:0": 40 * GIB})


def test_cpu_sets_are_not_planned() -> None:
    specs = [ModelSpec(name="small", source="tiny-random:small"), ModelSpec(name="s", engine="sim")]
    assert plan_specs(specs) is specs  # no CUDA model: the device's memory is not even asked for
