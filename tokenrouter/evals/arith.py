"""`workload=arith`: the arith task (`tokenrouter.tasks.arith`, the local pair's training task) as a benchmark
workload of held-out problems, graded exactly."""

from __future__ import annotations

from typing import Any

from tokenrouter.errors import UserError
from tokenrouter.tasks.arith import ArithSpec, generate, messages


def load_arith(cfg: Any, seed: int = 0) -> Any:
    """The `arith` workload: cfg.limit (else cfg.num_problems) problems for run seed `seed` + cfg.seed_offset."""
    from tokenrouter.evals.workloads import Problem, Workload

    get = cfg.get if hasattr(cfg, "get") else (lambda key, default=None: default)
    num = int(get("limit") or get("num_problems", 64))
    if num < 1:
        raise UserError(f"workload arith: num_problems must be >= 1, got {num}")
    spec = ArithSpec.from_cfg(cfg)
    items = generate(spec, seed + int(get("seed_offset", 0)), num)
    problems = [Problem(index=i, messages=messages(p), prompt_ids=None, answer=p.answer, kind="math") for i, p in enumerate(items)]
    return Workload(name=str(get("name", "arith")), problems=problems, max_new_tokens=int(get("max_new_tokens", 96)), kind="math")
