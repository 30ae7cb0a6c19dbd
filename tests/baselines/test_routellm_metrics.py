"""RouteLLM-style APGR / CPT on hand-built curves."""

from __future__ import annotations

import math

import pytest

from tokenrouter.baselines.routellm_metrics import apgr, cpt


def test_apgr_and_cpt() -> None:
    weak, strong = 0.4, 0.8
    # the random-mix line (accuracy linear in share) recovers half the gap on average, CPT(50%) at share 0.5
    line = [(0.25, 0.5), (0.5, 0.6), (0.75, 0.7)]
    assert apgr(line, weak, strong) == pytest.approx(0.5)
    assert cpt(line, weak, strong) == pytest.approx(0.5)
    # a router that reaches the strong accuracy at 20% strong calls
    good = [(0.1, 0.7), (0.2, 0.8), (0.6, 0.8)]
    # area under (0,.4) (.1,.7) (.2,.8) (.6,.8) (1,.8) = .055 + .075 + .32 + .32 = .77 -> (.77 - .4) / .4
    assert apgr(good, weak, strong) == pytest.approx(0.925)
    assert cpt(good, weak, strong, 0.5) == pytest.approx(
        0.1 * 0.2 / 0.3
    )  # interpolated: 0.6 reached on 0->0.1
    assert cpt(good, weak, strong, 0.75) == pytest.approx(0.1)
    assert math.isnan(apgr(good, 0.5, 0.5)) and math.isnan(cpt(good, 0.5, 0.5))
