"""The best rule a subserver can run on what it observes (own queue length, N)."""

from __future__ import annotations

import numpy as np
import pytest

from tokenrouter.perfmodel import SystemSpec, optimize, preset, throughput
from tokenrouter.perfmodel.chain import threshold_rule
from tokenrouter.perfmodel.local import best_local_rule, is_live, rule_value, splits


def r2r(p: float = 0.35) -> SystemSpec:
    return SystemSpec.build(*preset("r2r", route_prob=p), [6.0, 27.9], 1.0)


def test_splits_cover_every_queue_split() -> None:
    k = splits(3, 2)
    assert sorted(map(tuple, k.tolist())) == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert len(splits(4, 3)) == 15


def test_liveness_is_the_threshold_feasibility_rule_on_thresholds() -> None:
    for b0 in range(1, 5):
        for b1 in range(1, 5):
            assert is_live(threshold_rule([b0, b1], 3), 3) == ((b0 - 1) + (b1 - 1) < 3)


def test_a_non_monotone_rule_is_live_when_every_split_launches() -> None:
    go = np.zeros((2, 4), dtype=bool)
    go[0, [1, 3]] = True  # model 0 launches at 1 or 3 queued, waits at 2
    go[1, 1:] = True
    assert is_live(go, 3)  # splits (3,0) (2,1) (1,2) (0,3) launch at model 0, 1, 0 or 1, 1
    go[1, 1] = False
    assert not is_live(go, 3)  # (2, 1) stalls


def test_threshold_rules_match_the_chain() -> None:
    spec = r2r()
    assert rule_value(spec, 4, threshold_rule([1, 3], 4)) == pytest.approx(throughput(spec, 4, [1, 3]).throughput_tok_s)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_best_local_rule_is_never_below_the_best_thresholds(n: int) -> None:
    spec = r2r()
    best = optimize(spec, n).best
    res = best_local_rule(spec, n, best.thresholds)
    assert res.exhaustive
    assert res.best.throughput_tok_s >= best.throughput_tok_s * (1 - 1e-9)
    assert res.best_thresholds.thresholds() == list(best.thresholds)


def test_masks_are_the_wire_form() -> None:
    spec = r2r()
    res = best_local_rule(spec, 3, [1, 2])
    assert res.best.masks == [0b1110, 0b1100]  # thresholds [1, 2] at N = 3
