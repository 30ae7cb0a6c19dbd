"""What the sglang engine and the SGLang baseline servers ask SGLang for, as pure functions of the model spec.

No SGLang import here, so CPU tests check every GPU-side decision (read against sglang==0.5.23's source):
- KV size. SGLang sizes its pool as `free_now - free_at_start * (1 - mem_fraction_static)`, capped by
  `max_total_tokens` (mem_cache/kv_cache_configurator.py `_profile_available_bytes`, pool_configurator.py),
  where free_at_start is measured when THIS runner starts (distributed/bootstrap.py
  `measure_pre_model_load_memory`). Two models starting at once on one GPU therefore get start-order-
  dependent pools from a fraction. So the joint memory plan (memory_plan.py) turns `mem_fraction` into an
  absolute `kv_tokens`, passed as `max_total_tokens`, with a permissive `mem_fraction_static` that only
  keeps SGLang's own cap from binding first; the plan's per-device reserve is what leaves room for
  activations. A spec that was not planned (mem_fraction still set) passes the fraction alone: passing
  both would make SGLang take the smaller (the old baselines' 65,536-token default cut their KV).
- Prefill CUDA graphs: on by default on CUDA (model_executor/cuda_graph_config.py `default_prefill_backend`:
  BREAKABLE), where the engine's hand-built EXTEND batches (hand-off extends, parked-request resumes) would
  take a replay path nothing here has run; off, deliberately (they speed up prefill, not the decoding
  throughput Table 3 measures). Decode graphs stay on: `decode_graph_replay` counts only those.
- The TP memory-balance check (bootstrap.py `_check_tp_memory_balance`, raising under
  SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK, default on) trips when a TP server's rank 0 shares its GPU with
  another model, as the paper's placement does; the plan accounts for that memory, so it is turned off for
  tp > 1 (official R2R does the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenrouter.config import ModelSpec
from tokenrouter.engine.placement import COLLECTIVE_TIMEOUT_S, rank_device

PLANNED_MEM_FRACTION = 0.98  # with a planned max_total_tokens: high enough that SGLang's fraction cap never binds
TP_BALANCE_ENV = "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"


def kv_sizing(spec: ModelSpec) -> dict[str, int | float]:
    """SGLang's KV arguments for `spec` (ServerArgs field -> value)."""
    if spec.device == "cpu":
        return {"max_total_tokens": int(spec.kv_tokens)}
    if spec.mem_fraction is not None:  # not planned: SGLang sizes from the memory free when it starts
        return {"mem_fraction_static": float(spec.mem_fraction)}
    return {"max_total_tokens": int(spec.kv_tokens), "mem_fraction_static": PLANNED_MEM_FRACTION}


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank of a model's SGLang group runs: SpawnRanks(world_rank, gpu_id) and ServerArgs.base_gpu_id,
    as SGLang's launcher computes them for its scheduler processes (entrypoints/engine.py: gpu_id = base_gpu_id
    + tp_rank * gpu_id_step, step 1; world rank = tp rank with pp = 1)."""

    world_rank: int
    gpu_id: int
    base_gpu_id: int


def rank_placement(spec: ModelSpec, rank: int) -> RankPlacement:
    """Rank `rank` of `spec`'s tp ranks: consecutive GPUs from the model's device (cuda:K -> K + rank), as the
    torch engine's ranks (tp.rank_device) and the memory plan place them."""
    if not 0 <= rank < spec.tp:
        raise ValueError(f"rank {rank} outside tp={spec.tp}")

    def index(device: str) -> int:
        return int(device.split(":")[1]) if ":" in device else 0

    return RankPlacement(world_rank=rank, gpu_id=index(rank_device(spec, rank)), base_gpu_id=index(spec.device))


MAX_RUNNING_REQUESTS = 512  # requests one sglang engine holds at once (parked ones included); more wait for a row


def engine_server_args(spec: ModelSpec, model_path: str, gpu_id: int, cuda_graph: bool) -> dict[str, Any]:
    """ServerArgs for the sglang engine's ModelRunner (one runner per subserver or TP rank, no scheduler);
    `gpu_id`: the model's first GPU (every rank passes the same; its own GPU is in its RankPlacement)."""
    on_cpu = spec.device == "cpu"
    return {
        "model_path": model_path, "skip_tokenizer_init": True, "dtype": spec.dtype,
        "device": "cpu" if on_cpu else "cuda", "base_gpu_id": gpu_id, "tp_size": spec.tp, "random_seed": 0,
        "disable_radix_cache": True, "attention_backend": "torch_native" if on_cpu else None,
        "disable_cuda_graph": not cuda_graph,
        "disable_prefill_cuda_graph": True,  # see the module docstring
        "return_hidden_states_mode": "last",  # CUDA graphs capture the last hidden state our routers read
        # its request table is (rows + 1) x (context + 4) int32 per process, outside the KV pool: unset, SGLang
        # takes 2048-4096 rows (0.3-0.7 GiB at Qwen3's 40k context); a row per request held here is plenty
        "max_running_requests": MAX_RUNNING_REQUESTS,
        "dist_timeout": COLLECTIVE_TIMEOUT_S,  # a rank dead inside a forward fails rank 0's collective in minutes
        **kv_sizing(spec),
    }


def server_kv_flags(spec: ModelSpec) -> list[str]:
    """`sglang.launch_server` flags for the same KV sizing as the engine's."""
    flags = {"max_total_tokens": "--max-total-tokens", "mem_fraction_static": "--mem-fraction-static"}
    return [arg for key, value in kv_sizing(spec).items() for arg in (flags[key], str(value))]


def server_env(spec: ModelSpec) -> dict[str, str]:
    """Environment for an SGLang process serving `spec` (see the TP memory-balance check above)."""
    return {TP_BALANCE_ENV: "0"} if spec.tp > 1 and spec.device != "cpu" else {}


def decode_graph_replay(decode: bool, can_run_graph: bool) -> bool:
    """Whether a step replayed a DECODE CUDA graph (what the CUDA test's graph_steps must show)."""
    return decode and bool(can_run_graph)


def eos_ids(model_dir: str) -> tuple[int, ...]:
    """End-of-sequence ids of a LOCAL model directory: the generation config's (may be a list), else the model
    config's / tokenizer's. A Hub id must be resolved to its cached snapshot first (loader.local_dir): without
    EOS ids a model never stops before max_new_tokens."""
    from transformers import AutoConfig, GenerationConfig

    ids: list[int] = []
    try:
        sources = [GenerationConfig.from_pretrained(model_dir, local_files_only=True)]
    except OSError:
        sources = []
    sources.append(AutoConfig.from_pretrained(model_dir, local_files_only=True))
    for src in sources:
        eos = getattr(src, "eos_token_id", None)
        if eos is not None:
            ids += eos if isinstance(eos, list | tuple) else [eos]
    if not ids:  # as the torch engine does: the tokenizer's EOS when no config names one
        from transformers import AutoTokenizer

        try:
            eos = AutoTokenizer.from_pretrained(model_dir, local_files_only=True).eos_token_id
        except (OSError, ValueError):
            eos = None
        ids += [] if eos is None else [eos]
    return tuple(dict.fromkeys(int(i) for i in ids))


# The oldest Linux driver branch each CUDA major runs on (NVIDIA's CUDA toolkit release notes, "minimum
# required driver"). sglang==0.5.23 pins torch 2.14.1 built for CUDA 13, flashinfer's cu13 wheels and
# cuda-python >= 13: it needs a driver of the R580 branch or newer.
MIN_DRIVER = {12: 525, 13: 580}
SGLANG_CUDA = "13.0"  # the CUDA of sglang==0.5.23's pinned torch (its own venv, for the baseline servers)


def driver_problem(cuda_version: str | None, driver_version: str | None) -> str | None:
    """Why this machine's NVIDIA driver cannot run a torch built for `cuda_version` (torch.version.cuda), or
    None when it can or either version is unknown (the check is advice, not a gate on unknown systems)."""
    if not cuda_version or not driver_version:
        return None
    try:
        major, driver = int(cuda_version.split(".")[0]), int(driver_version.split(".")[0])
    except ValueError:
        return None
    need = MIN_DRIVER.get(major)
    if need is None or driver >= need:
        return None
    return (f"this torch is built for CUDA {cuda_version}, which needs an NVIDIA driver >= {need}; this machine has "
            f"{driver_version} (sglang==0.5.23 pins a CUDA {major} torch): update the driver, or use the torch "
            "engine (models.members.N.engine=torch) in an environment with a torch for this driver")


def nvidia_driver_version() -> str | None:
    """The driver version nvidia-smi reports for the first GPU (None without nvidia-smi)."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None
