"""The arith generator: deterministic per seed and split, correct worked steps, graded exactly."""

from __future__ import annotations

import re

import pytest

from tokenrouter.tasks.arith import PROMPT_PREFIX, ArithSpec, generate
from tokenrouter.tasks.grading import is_correct


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
        assert re.fullmatch(r"\\boxed\{(\d+)\}", lines[-1]) and int(lines[-1][7:-1]) == values[-1]
        for line, before, after in zip(lines[:-1], values[:-1], values[1:], strict=True):
            a, op, b, c = re.fullmatch(r"(\d+)([+\-*])(\d+)=(\d+)", line).groups()
            ops_seen.add(op)
            assert (int(a), int(c)) == (before, after)
            assert _left_to_right(f"{a}{op}{b}")[-1] == int(c)
            assert op != "*" or 2 <= int(b) <= spec.max_factor
    assert ops_seen == set(spec.ops)


@pytest.mark.parametrize("spec", [ArithSpec(), ArithSpec(max_value=99, ops="+-")])
def test_padding_puts_every_digit_at_a_fixed_position(spec: ArithSpec) -> None:
    """Why pad exists: every problem of a spec has the same prompt and solution length (so a one-layer model
    finds each operand at a fixed offset); unpadded problems vary."""
    problems = generate(spec, 2, 200)
    assert len({(len(p.prompt), len(p.solution)) for p in problems}) == 1
    unpadded = generate(ArithSpec(max_value=spec.max_value, ops=spec.ops, pad=False), 2, 200)
    assert len({len(p.solution) for p in unpadded}) > 1
    assert [p.answer for p in unpadded] == [p.answer for p in problems]  # same values, only the digits differ


def test_worked_solutions_grade_correct_and_wrong_answers_do_not() -> None:
    for problem in generate(ArithSpec(), 1, 20):
        assert is_correct(problem.solution, problem.answer)
        wrong = problem.solution.rsplit("\\boxed", 1)[0] + f"\\boxed{{{int(problem.answer) + 1}}}"
        assert not is_correct(wrong, problem.answer)
