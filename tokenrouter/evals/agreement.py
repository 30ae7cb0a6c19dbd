"""Outputs compared token by token between two systems' runs of the same prompts (requests.jsonl of each).

Why: throughput ratios mean something only if the systems did the same work. Two implementations of R2R with
the same models, router, threshold and greedy decoding should emit the same tokens; where they do not, the
first differing position and who made that token say whether routing or arithmetic diverged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenrouter.evals.bench import REQUESTS_FILE


@dataclass(frozen=True)
class Difference:
    """The first position where one request's outputs differ, and why as far as the records tell."""

    index: int  # request index
    position: int  # first differing output position (0-based)
    tokens: tuple[int | None, int | None]  # the two tokens there (None: that output ended)
    cause: str


@dataclass(frozen=True)
class Agreement:
    """How many requests the two runs answered identically, and the first difference of each other one."""

    requests: int
    identical: int
    differences: tuple[Difference, ...]

    @property
    def first(self) -> Difference | None:
        """The difference at the earliest position (the most telling one)."""
        return min(self.differences, key=lambda d: d.position, default=None)


def load_requests(run_dir: Path) -> dict[int, dict]:
    """A run's finished requests by index (requests with an error are left out)."""
    rows = (json.loads(line) for line in (run_dir / REQUESTS_FILE).read_text().splitlines() if line.strip())
    return {int(r["index"]): r for r in rows if not r.get("error")}


def model_at(record: dict, position: int) -> str | None:
    """Which model made output token `position`, from the record's routing trace (`model_runs`); None when the
    system does not record one (e.g. the official server, which reports only its large-model share)."""
    runs = record.get("model_runs")
    if not runs:
        return None
    end = 0
    for model, count in runs:
        end += int(count)
        if position < end:
            return str(model)
    return None


def large_share(record: dict) -> float:
    counts = record.get("tokens_per_model") or {}
    total = sum(counts.values())
    return (list(counts.values())[-1] / total) if total and len(counts) > 1 else 0.0


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where the two outputs differ (a length difference counts), None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _cause(a: dict, b: dict, position: int) -> str:
    made = (model_at(a, position), model_at(b, position))
    if None not in made:
        if made[0] != made[1]:
            return f"routing: {made[0]} made it in one, {made[1]} in the other"
        return f"numerics: both from {made[0]}, different argmax"
    if position >= min(len(a["output_ids"]), len(b["output_ids"])):
        return "length: one output stopped earlier"
    share = (large_share(a), large_share(b))
    if abs(share[0] - share[1]) > 1e-9:
        return f"routing likely: large-model share {share[0]:.3f} vs {share[1]:.3f}"
    return "unknown: same large-model share, different token"


def _token_at(output: list[int], position: int) -> int | None:
    return output[position] if position < len(output) else None


def compare(a: dict[int, dict], b: dict[int, dict]) -> Agreement:
    """Token-by-token agreement over the requests both runs finished."""
    common = sorted(set(a) & set(b))
    differences = []
    for index in common:
        out_a, out_b = a[index]["output_ids"], b[index]["output_ids"]
        position = first_difference(out_a, out_b)
        if position is not None:
            tokens = (_token_at(out_a, position), _token_at(out_b, position))
            differences.append(Difference(index, position, tokens, _cause(a[index], b[index], position)))
    return Agreement(len(common), len(common) - len(differences), tuple(differences))


def describe(agreement: Agreement) -> str:
    """One line: identical count, and the earliest difference with its cause."""
    line = f"{agreement.identical}/{agreement.requests} identical"
    first = agreement.first
    if first is not None:
        line += (f"; first difference: request {first.index} at token {first.position} "
                 f"({first.tokens[0]} vs {first.tokens[1]}), {first.cause}")
    return line


def pairs(names: Iterable[str]) -> list[tuple[str, str]]:
    """Every unordered pair of systems, in the order given."""
    names = list(names)
    return [(x, y) for i, x in enumerate(names) for y in names[i + 1:]]
