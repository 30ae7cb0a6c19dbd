"""Start-up profiles time CUDA work on the engine's own device."""

from __future__ import annotations

import pytest
import torch

from tokenrouter.engine import profiling
from tokenrouter.engine.base import StepItem, StepOutput


class _OnGpu1:
    device = torch.device("cuda:1")

    def step(self, items: list[StepItem]) -> StepOutput:
        return StepOutput(rids=[it.rid for it in items], next_tokens=[0] * len(items))


def test_timed_step_synchronizes_the_engines_device(monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    assert profiling._timed_step(_OnGpu1(), [StepItem("r", [1])]) >= 0.0  # type: ignore[arg-type]
    assert synced == [torch.device("cuda:1")] * 2  # never a bare synchronize() (GPU 0's context)
