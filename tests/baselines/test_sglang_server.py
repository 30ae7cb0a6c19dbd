"""How SGLang servers are launched (command, environment, refusals) and how their /metrics are read; the
real servers run in tests/baselines/test_sglang_baselines.py (`make test-sglang`)."""

from __future__ import annotations

import pytest

from tokenrouter.baselines.sglang_server import (
    SGLangServerOptions,
    scheduler_stages,
    sglang_command,
    sglang_python,
)
from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError


def test_cpu_command_has_the_flags_that_make_sglang_usable_on_cpu(tmp_path) -> None:
    py = tmp_path / "python"
    py.write_text("")
    spec = ModelSpec(name="small", source="tiny:small", device="cpu", threads=2, kv_tokens=4096)
    cmd, env = sglang_command(spec, "/m", 31000, 7, True, SGLangServerOptions(python=str(py), args=["--x", "1"]))
    assert cmd[:3] == [str(py), "-m", "sglang.launch_server"]
    flags = " ".join(cmd)
    for part in ("--model-path /m", "--host 127.0.0.1", "--port 31000", "--random-seed 7", "--device cpu",
                 "--attention-backend torch_native", "--sleep-on-idle", "--enable-metrics",
                 "--max-total-tokens 4096", "--enable-return-hidden-states"):
        assert part in flags
    assert cmd[-2:] == ["--x", "1"]
    assert env["PYTHONPATH"].endswith("_sglang_cpu_shim") and env["OMP_NUM_THREADS"] == "2"
    gpu, _ = sglang_command(ModelSpec(name="g", source="x", device="cuda:0", tp=2, cuda_graph=False), "/m", 1, 0,
                            False, SGLangServerOptions(python=str(py)))
    assert "--tp-size 2" in " ".join(gpu) and "--disable-cuda-graph" in gpu and "--device" not in gpu
    assert "--base-gpu-id 0" in " ".join(gpu)
    # each server on its model's own GPUs (a three-model set: 0.6B on cuda:0, 8B on cuda:1, 32B on cuda:2..3)
    third, _ = sglang_command(ModelSpec(name="xl", source="x", device="cuda:2", tp=2), "/m", 1, 0, False,
                              SGLangServerOptions(python=str(py)))
    assert "--base-gpu-id 2" in " ".join(third)


def test_refusals_are_one_line() -> None:
    opts = SGLangServerOptions(python="/bin/sh")
    with pytest.raises(UserError, match="tensor parallelism needs CUDA"):
        sglang_command(ModelSpec(name="s", source="x", device="cpu", tp=2), "/m", 1, 0, False, opts)
    with pytest.raises(UserError, match="sim engine"):
        sglang_command(ModelSpec(name="s", engine="sim"), "/m", 1, 0, False, opts)
    with pytest.raises(UserError, match="not a file"):
        sglang_python("/no/such/python")
    with pytest.raises(UserError, match="startup_timeout_s"):
        SGLangServerOptions.from_dict({"startup_timeout_s": 0}, "system x")
    with pytest.raises(UserError, match="list of strings"):
        SGLangServerOptions.from_dict({"args": "--x"}, "system x")


def test_scheduler_stages_sum_the_categories_and_forward_passes() -> None:
    m = 'engine_type="unified",model_name="/m",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    text = "\n".join([
        "# HELP sglang:scheduler_stage_seconds_total x",
        f'sglang:scheduler_stage_seconds_total{{category="run_batch",{m},forward_overlap="none"}} 0.25',
        f'sglang:scheduler_stage_seconds_total{{category="run_batch",{m},forward_overlap="full"}} 0.05',
        f'sglang:scheduler_stage_seconds_total{{category="get_next_batch_to_run",{m},forward_overlap="none"}} 0.1',
        f'sglang:cuda_graph_passes_total{{mode="prefill_none",{m}}} 50.0',
        f'sglang:cuda_graph_passes_total{{mode="decode_none",{m}}} 10.0',
        'sglang:e2e_request_latency_seconds_sum{engine_type="unified",is_streaming="false",model_name="/m"} 0.6',
        'sglang:e2e_request_latency_seconds_count{engine_type="unified",is_streaming="false",model_name="/m"} 51.0',
        'sglang:e2e_request_latency_seconds_bucket{engine_type="unified",le="0.1",model_name="/m"} 51.0',
    ])
    got = scheduler_stages(text)
    assert got["stage_run_batch"] == pytest.approx(0.3) and got["stage_get_next_batch_to_run"] == pytest.approx(0.1)
    assert got["forward_passes"] == 60 and got["e2e_s"] == pytest.approx(0.6) and got["requests"] == 51


@pytest.mark.parametrize("overrides", [
    ["system=single_sglang", "system.model=large"],
    ["system=query_routing_sglang"],
    ["system=std_serving_sglang", "algorithm=rstitch"],
])
def test_sglang_system_configs_build_sglang_servers(overrides: list[str]) -> None:
    """The `*_sglang` system configs compose and build systems whose servers are SGLang's (not started here)."""
    from tokenrouter.baselines.http_model import HttpModelSystem
    from tokenrouter.cli.hydra_config import compose
    from tokenrouter.evals.systems import build_system

    system = build_system(compose(["models=tiny", *overrides]))
    if overrides[0] == "system=single_sglang":
        assert isinstance(system, HttpModelSystem) and system.kind == "sglang" and system.model_names == ["large"]
    elif overrides[0] == "system=query_routing_sglang":
        assert all(isinstance(s, HttpModelSystem) and s.kind == "sglang" for s in system.systems)
    else:
        assert system.opts.server == "sglang" and system.logits_from_hidden and not system.want_hidden
