from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evals.arith import PROMPT_PREFIX, ArithSpec, generate
from evals.grading import is_correct
from evals.workloads import load_workload
from tokenrouter.errors import UserError

CONF = Path(__file__).resolve().parents[2] / "conf" / "workload" / "arith.yaml"


def _left_to_right(expr: str) -> list[int]:
    """Running values of `expr` evaluated left to right, computed independently of the generator."""
    start, rest = re.fullmatch(r"(\d+)((?:[+\-*]\d+)+)", expr).groups()
    values = [int(start)]
    for op, num in re.findall(r"([+\-*])(\d+)", rest):
        a, b = values[-1], int(num)
        values.append(a + b if op == "+" else a - b if op == "-" else a * b)
    return values


def test_problems_are_deterministic_per_seed_and_split() -> None:
    spec = ArithSpec()
    assert generate(spec, 3, 40) == generate(spec, 3, 40)
    assert generate(spec, 3, 40) != generate(spec, 4, 40)
    assert generate(spec, 3, 40) != generate(spec, 3, 40, split="train")
    assert len({p.prompt for p in generate(spec, 0, 500)}) == 500


@pytest.mark.parametrize("spec", [ArithSpec(), ArithSpec(num_steps=2, max_value=99, ops="+-"), ArithSpec(ops="-*")])
def test_answers_and_worked_steps_are_correct(spec: ArithSpec) -> None:
    ops_seen = set()
    for problem in generate(spec, 7, 300):
        assert problem.prompt.startswith(PROMPT_PREFIX)
        expr = problem.prompt[len(PROMPT_PREFIX):]
        values = _left_to_right(expr)
        assert len(values) == spec.num_steps + 1
        assert all(0 <= v <= spec.max_value for v in values)
        assert problem.answer == str(values[-1])
        lines = problem.solution.split("\n")
        assert lines[-1] == f"\\boxed{{{values[-1]}}}"
        for line, before, after in zip(lines[:-1], values[:-1], values[1:], strict=True):
            a, op, b, c = re.fullmatch(r"(\d+)([+\-*])(\d+)=(\d+)", line).groups()
            ops_seen.add(op)
            assert (int(a), int(c)) == (before, after)
            assert _left_to_right(f"{a}{op}{b}")[-1] == int(c)
            assert op != "*" or 2 <= int(b) <= spec.max_factor
    assert ops_seen == set(spec.ops)


def test_worked_solutions_grade_correct_and_wrong_answers_do_not() -> None:
    for problem in generate(ArithSpec(), 1, 20):
        assert is_correct(problem.solution, problem.answer)
        wrong = problem.solution.rsplit("\\boxed", 1)[0] + f"\\boxed{{{int(problem.answer) + 1}}}"
        assert not is_correct(wrong, problem.answer)


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
