"""Router training pieces: AUC, the recall threshold in each algorithm's own terms, the problem split, the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokenrouter.algorithms import build_algorithm
from tokenrouter.algorithms.training import (
    algorithm_threshold,
    raw_threshold_for_recall,
    roc_auc,
    split_problems,
)
from tokenrouter.cli import main


def test_roc_auc_matches_pairwise_definition() -> None:
    rng = np.random.default_rng(0)
    scores = np.round(rng.normal(size=300), 1)  # rounding makes ties
    labels = (rng.random(300) < 0.3).astype(float)
    pos, neg = scores[labels > 0.5], scores[labels < 0.5]
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size)
    assert roc_auc(scores, labels) == pytest.approx(pairwise)
    assert roc_auc(np.array([0.1, 0.9]), np.array([0.0, 1.0])) == 1.0
    assert np.isnan(roc_auc(np.array([0.1, 0.9]), np.array([1.0, 1.0])))


@pytest.mark.parametrize("name,param", [("r2r", "threshold"), ("citer", "tau"), ("co_llm", "eta")])
def test_recall_threshold_means_the_same_rows_in_every_algorithm(name: str, param: str) -> None:
    rng = np.random.default_rng(1)
    raw = rng.normal(scale=3.0, size=500)
    labels = (raw + rng.normal(scale=2.0, size=500) > 1.0).astype(float)
    for recall in (0.5, 0.9, 1.0):
        cut = raw_threshold_for_recall(raw, labels, recall)
        flagged = raw > cut
        assert flagged[labels > 0.5].mean() >= recall
        # The highest such cut: cutting at the lowest flagged positive instead would miss the target.
        positives = raw[labels > 0.5]
        assert (positives > positives[positives > cut].min()).mean() < recall
        algo = build_algorithm(name, 0, ["small", "large"], {param: algorithm_threshold(name, cut)})
        assert algo.flags(torch.tensor(raw, dtype=torch.float64)).tolist() == flagged.tolist()


def test_split_holds_out_whole_problems_deterministically() -> None:
    groups = torch.tensor([0] * 5 + [1] * 3 + [2] * 7 + [3] * 2 + [4] * 4)
    held = split_problems(groups, 0.4, seed=3)
    assert torch.equal(held, split_problems(groups, 0.4, seed=3))
    held_problems = set(groups[held].tolist())
    assert len(held_problems) == 2 and not held_problems & set(groups[~held].tolist())
    assert len({tuple(split_problems(groups, 0.4, seed=s).tolist()) for s in range(10)}) > 1


def test_train_router_cli_rejects_bad_input_clearly(capsys) -> None:
    assert main(["train-router", "models=tiny-random"]) == 2
    assert "--algorithm" in capsys.readouterr().err
    assert main(["train-router", "--algorithm", "r2r", "models=sim-r2r"]) == 2
    assert "needs a pair of torch models" in capsys.readouterr().err
    assert main(["train-router", "--algorithm", "r2r", "models=no-such-set"]) == 2
    assert "config:" in capsys.readouterr().err
    assert main(["train-router", "--algorithm", "r2r", "--target-recall", "1.5"]) == 2
    assert "target recall" in capsys.readouterr().err
