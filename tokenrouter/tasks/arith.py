"""The `arith` task: chained integer arithmetic generated from a seed, worked step by step, graded exactly.

Why this task: each problem is a chain of small operations, so one slip anywhere makes the final answer wrong.
Accuracy therefore falls off sharply with model capacity, which gives the local model pair (trained by
`tokenrouter make-pair` on the same generator) a real quality gap for routing to close. Every step of the
worked solution is written out, so the solution format doubles as the training target.

Problem:  "Compute left to right: 37+48-59*03-12"
Solution: "37+48=85\n85-59=26\n26*03=78\n78-12=66\n\\boxed{66}"

Numbers are zero-padded to the width of max_value (`pad`, the default): every problem of a spec then has the same
length and every digit a fixed position, so what a step needs sits at fixed relative offsets. That keeps the
task within reach of a one-layer model (which cannot search the prompt for the next operand the way deeper
models learn to), so the local pair's small member is right often enough for a router to have something to
keep. Grading is by value (`\\boxed{07}` is 7), so padded and unpadded answers grade alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any

from tokenrouter.errors import UserError

PROMPT_PREFIX = "Compute left to right: "


@dataclass(frozen=True)
class ArithSpec:
    """Difficulty knobs. Operations keep every running value in [0, max_value] (no negatives)."""

    num_steps: int = 4  # operations per problem
    max_value: int = 99  # running values (and so every operand and result) never exceed this
    max_factor: int = 9  # multiplications are by 2..max_factor
    ops: str = "+-*"
    pad: bool = True  # zero-pad every number to the digits of max_value (fixed-position problems; see above)

    def __post_init__(self) -> None:
        if self.num_steps < 1 or self.max_value < 10 or self.max_factor < 2:
            raise UserError("workload arith: need num_steps >= 1, max_value >= 10, max_factor >= 2")
        if not self.ops or set(self.ops) - set("+-*") or not set(self.ops) & set("+-"):
            raise UserError(f"workload arith: ops must be drawn from '+-*' and include + or -, got {self.ops!r}")

    @classmethod
    def from_cfg(cls, cfg: Any) -> ArithSpec:
        """The knobs present in a workload config node (others keep their defaults)."""
        get = cfg.get if hasattr(cfg, "get") else (lambda key, default=None: default)
        values = {f.name: get(f.name) for f in fields(cls) if get(f.name) is not None}
        return cls(**values)


@dataclass(frozen=True)
class ArithProblem:
    prompt: str
    solution: str  # worked steps ending in \boxed{answer}
    answer: str


def _fmt(value: int, spec: ArithSpec) -> str:
    return str(value).zfill(len(str(spec.max_value))) if spec.pad else str(value)


def _step(rng: random.Random, value: int, spec: ArithSpec) -> tuple[str, int]:
    """One operation that keeps the running value in range; falls back to + or - when * cannot fit."""
    options = [
        op
        for op in spec.ops
        if (op == "+" and value < spec.max_value) or (op == "-" and value > 0) or (op == "*" and value * 2 <= spec.max_value)
    ]
    op = rng.choice(options or ["-"])
    if op == "+":
        operand = rng.randint(1, spec.max_value - value)
        return f"+{_fmt(operand, spec)}", value + operand
    if op == "-":
        operand = rng.randint(1, value)
        return f"-{_fmt(operand, spec)}", value - operand
    operand = rng.randint(2, min(spec.max_factor, spec.max_value // value if value else spec.max_factor))
    return f"*{_fmt(operand, spec)}", value * operand


def make_problem(rng: random.Random, spec: ArithSpec) -> ArithProblem:
    value = rng.randint(10, spec.max_value)
    expr, lines = _fmt(value, spec), []
    for _ in range(spec.num_steps):
        op, new_value = _step(rng, value, spec)
        expr += op
        lines.append(f"{_fmt(value, spec)}{op}={_fmt(new_value, spec)}")
        value = new_value
    lines.append(f"\\boxed{{{_fmt(value, spec)}}}")
    return ArithProblem(prompt=PROMPT_PREFIX + expr, solution="\n".join(lines), answer=str(value))


def generate(spec: ArithSpec, seed: int, count: int, split: str = "eval") -> list[ArithProblem]:
    """`count` problems from the stream named by (split, seed): the same arguments give the same problems on
    every machine (string seeds hash with SHA-512 in `random`). Training uses split="train", so held-out
    evaluation problems come from a different stream."""
    rng = random.Random(f"arith:{split}:{seed}")
    return [make_problem(rng, spec) for _ in range(count)]


def messages(problem: ArithProblem) -> list[dict[str, str]]:
    return [{"role": "user", "content": problem.prompt}]

