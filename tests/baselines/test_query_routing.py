"""RouteLLM query-level routing: threshold calibration hits the target strong share; whole queries run on one
model; RouteLLM's metrics from per-prompt correctness."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tokenrouter.baselines.query_routing import load_router, routellm_metrics, strong_threshold
from tokenrouter.cli import main
from tokenrouter.errors import UserError

pytest.importorskip("routellm")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # RouteLLM's pydantic-v1 validators


def test_runs_and_hits_target_share_on_40_prompts(tmp_path: Path) -> None:
    assert main(["bench", "models=sim-r2r", "system=query_routing", "system.strong_share=0.3",
                 "workload.num_requests=40", "workload.output_tokens=3", "concurrency=8",
                 f"hydra.run.dir={tmp_path}"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    stats = summary["stats"]
    assert abs(stats["strong_share"] - 0.3) <= 0.10
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    for r in rows:  # the whole query ran on the model the router chose
        chosen = r["extra"]["routed_to"]
        assert r["tokens_per_model"] == {chosen: 3}
        assert (r["extra"]["win_rate"] >= stats["threshold"]) == (chosen == "large")
    strong = sum(r["extra"]["routed_to"] == "large" for r in rows) / 40
    assert strong == pytest.approx(stats["strong_share"])
    assert summary["token_share"]["large"] == pytest.approx(strong)
    assert "OPENAI_API_KEY" not in os.environ or os.environ["OPENAI_API_KEY"] != "placeholder-for-routellm-import"


def test_threshold_is_exact_on_ranks() -> None:
    rates = [0.9, 0.1, 0.5, 0.7, 0.3]
    for share, expected in ((0.0, 0), (0.2, 1), (0.4, 2), (0.6, 3), (1.0, 5)):
        t = strong_threshold(rates, share)
        assert sum(r >= t for r in rates) == expected
    with pytest.raises(UserError, match="strong_share"):
        strong_threshold(rates, 1.5)


def test_unknown_router_and_missing_checkpoint_are_clear() -> None:
    with pytest.raises(UserError, match="must be one of"):
        load_router("nope", {})
    with pytest.raises(UserError, match="could not be built"):
        load_router("bert", {"checkpoint_path": "/nonexistent/bert-router"})


def test_routellm_metrics() -> None:
    # the router ranks prompts 0..3; the strong model fixes prompts 0 and 1 (which the router ranks first)
    win = {0: 0.9, 1: 0.8, 2: 0.2, 3: 0.1}
    weak = {0: False, 1: False, 2: True, 3: True}
    strong = {0: True, 1: True, 2: True, 3: True}
    m = routellm_metrics(win, weak, strong)
    assert m["weak_accuracy"] == 0.5 and m["strong_accuracy"] == 1.0
    assert m["cpt50"] == pytest.approx(0.25)  # one strong call recovers half of the gap
    assert 0.5 < m["apgr"] <= 1.0
    worst = routellm_metrics({0: 0.1, 1: 0.2, 2: 0.8, 3: 0.9}, weak, strong)  # ranks them last
    assert worst["apgr"] < m["apgr"] and worst["cpt50"] > m["cpt50"]
    assert not math.isnan(m["apgr"])
