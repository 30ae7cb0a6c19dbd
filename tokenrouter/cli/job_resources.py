"""What one run holds on a cluster (GPUs, CPUs, host memory), computed from its model set, so the launcher
configs in conf/hydra/launcher/ request it through a resolver (`${tokenrouter.gpus:${models.members}}`) and a
user only picks the launcher and the cluster.

GPUs: a job sees the GPUs it was given as cuda:0 .. G-1 (SLURM and Ray set CUDA_VISIBLE_DEVICES), and a member
on `device: cuda:K` with `tp: T` uses cuda:K .. K+T-1, sharing devices with other members where they overlap
(the paper's 0.6B TP1 + 32B TP2 share two GPUs). So a run needs max(K + T) GPUs, not the sum of the members'
ranks, which would book a GPU that no process touches.
CPUs: the driver (bench client and router) plus `threads` per rank process.
Host memory: each non-sim rank stages its weights through host RAM while loading; sim engines hold none.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from tokenrouter.config import ModelSpec, model_specs

DRIVER_CPUS = 1
DRIVER_MEM_GB = 2
RANK_MEM_GB = 16  # a weighted rank (torch/sglang), weights staged through host RAM while loading
SIM_RANK_MEM_GB = 1  # a sim engine: no weights
_CUDA_INDEX = re.compile(r"cuda(?::(\d+))?$")


@dataclass(frozen=True)
class JobResources:
    """One run's request: GPUs (visible as cuda:0 .. gpus-1), CPU cores and host memory in GB."""

    gpus: int
    cpus: int
    mem_gb: int

    @classmethod
    def of(cls, specs: list[ModelSpec]) -> JobResources:
        gpus = 0
        for spec in specs:
            match = _CUDA_INDEX.match(spec.device)
            if match:
                gpus = max(gpus, int(match.group(1) or 0) + spec.tp)
        cpus = DRIVER_CPUS + sum(s.threads * s.tp for s in specs)
        mem = DRIVER_MEM_GB + sum(s.tp * (SIM_RANK_MEM_GB if s.engine == "sim" else RANK_MEM_GB) for s in specs)
        return cls(gpus=gpus, cpus=cpus, mem_gb=mem)

    @classmethod
    def of_members(cls, members: Any) -> JobResources:
        """From the `models.members` config node (what a resolver receives)."""
        return cls.of(model_specs({"members": members}))

    def local_jobs(self) -> int:
        """How many such runs one machine runs side by side (joblib): as many as its cores hold; one when the
        set uses GPUs, since every local run addresses the same cuda:0 .. gpus-1."""
        return 1 if self.gpus else max(1, (os.cpu_count() or 1) // self.cpus)
