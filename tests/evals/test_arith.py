"""The arith workload: loaded through the registry from its config, on the local pair's task defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tokenrouter.errors import UserError
from tokenrouter.evals.workloads import load_workload
from tokenrouter.tasks.arith import ArithSpec, generate

CONF = Path(__file__).resolve().parents[2] / "conf" / "workload" / "arith.yaml"


def test_workload_config_loads_through_the_registry_and_matches_the_pair_task() -> None:
    cfg = OmegaConf.load(CONF)
    assert ArithSpec.from_cfg(cfg) == ArithSpec()  # the pair is trained on ArithSpec() defaults
    workload = load_workload(cfg, seed=5)
    assert (workload.name, workload.kind, len(workload.problems)) == ("arith", "math", cfg.num_problems)
    assert workload.max_new_tokens == cfg.max_new_tokens
    first = workload.problems[0]
    assert first.messages == [{"role": "user", "content": generate(ArithSpec(), 5, 1)[0].prompt}]
    assert (first.prompt_ids, first.kind, first.answer) == (None, "math", generate(ArithSpec(), 5, 1)[0].answer)
    assert len(load_workload(OmegaConf.merge(cfg, {"limit": 3}), seed=5).problems) == 3
    shifted = load_workload(OmegaConf.merge(cfg, {"seed_offset": 1}), seed=4)
    assert [p.messages for p in shifted.problems] == [p.messages for p in workload.problems]


@pytest.mark.parametrize("override", [{"num_problems": 0}, {"num_steps": 0}, {"ops": "/"}, {"ops": "*"}])
def test_bad_knobs_are_one_line_user_errors(override: dict) -> None:
    with pytest.raises(UserError, match="workload arith"):
        load_workload(OmegaConf.merge(OmegaConf.load(CONF), override))
