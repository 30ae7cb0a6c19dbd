"""Outputs compared token by token between two runs (tokenrouter/evals/agreement.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tokenrouter.evals.agreement import compare, describe, first_difference, load_requests, model_at, pairs


def _record(index: int, output: list[int], runs: list | None = None, large: int = 0) -> dict:
    return {"index": index, "output_ids": output, "model_runs": runs, "error": None,
            "tokens_per_model": {"small": len(output) - large, "large": large}}


def test_first_difference_counts_a_shorter_output() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_model_at_reads_the_routing_trace() -> None:
    record = _record(0, [1] * 6, [["small", 3], ["large", 1], ["small", 2]])
    assert [model_at(record, i) for i in range(7)] == ["small"] * 3 + ["large"] + ["small"] * 2 + [None]
    assert model_at(_record(0, [1]), 0) is None  # the official server records no trace


def test_causes_routing_numerics_and_unknown() -> None:
    a = {0: _record(0, [1, 2, 3], [["small", 1], ["large", 1], ["small", 1]], large=1),
         1: _record(1, [4, 5], [["small", 2]]), 2: _record(2, [7, 8], [["small", 2]])}
    b = {0: _record(0, [1, 9, 3], [["small", 3]]), 1: _record(1, [4, 6], [["small", 2]]),
         2: _record(2, [7, 8], [["small", 2]])}
    agreement = compare(a, b)
    assert (agreement.requests, agreement.identical) == (3, 1)
    causes = {d.index: d.cause for d in agreement.differences}
    assert causes[0].startswith("routing: large made it") and causes[1].startswith("numerics: both from small")
    official = {0: {**_record(0, [1, 9, 3], large=0), "model_runs": None}}
    assert compare(a, official).first.cause == "routing likely: large-model share 0.333 vs 0.000"
    same_share = {0: {**_record(0, [1, 9, 3], large=1), "model_runs": None}}
    assert compare(a, same_share).first.cause.startswith("unknown")
    assert describe(agreement) == ("1/3 identical; first difference: request 0 at token 1 (2 vs 9), "
                                   "routing: large made it in one, small in the other")


def test_load_requests_leaves_out_failed_requests(tmp_path: Path) -> None:
    lines = [_record(0, [1]), {**_record(1, []), "error": "boom"}]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert list(load_requests(tmp_path)) == [0]
    assert pairs(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "c")]
