"""`system=single` (one model alone) and `system=official_r2r` (the public thu-nics/R2R code: set-up checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from baselines import official_r2r
from evals.systems import SystemSetup
from tokenrouter.cli import main
from tokenrouter.errors import UserError


def test_single_large_equals_lockstep_always_routing(tmp_path: Path) -> None:
    """LLM-only (system=single) on real tiny models equals lock-step R2R routing every token to the large model:
    each of its tokens then comes through a hand-off and an extend, so this also proves the KV catch-up exact."""
    common = ["models=tiny-random", "workload.num_requests=3", "workload.output_tokens=12", "concurrency=3"]
    assert main(["bench", *common, "system=single", "system.model=large", f"hydra.run.dir={tmp_path / 'single'}"]) == 0
    assert main(["bench", *common, "system=lockstep", "algorithm=bernoulli", "algorithm.route_prob=1.0",
                 f"hydra.run.dir={tmp_path / 'lockstep'}"]) == 0
    single, lock = (
        {r["index"]: r for r in map(json.loads, (tmp_path / d / "requests.jsonl").read_text().splitlines())}
        for d in ("single", "lockstep")
    )
    assert sorted(single) == sorted(lock) == [0, 1, 2]
    for i, r in single.items():
        assert r["output_ids"] == lock[i]["output_ids"]
        assert r["tokens_per_model"] == {"large": len(r["output_ids"])} and r["handoffs"] == 0
        assert lock[i]["tokens_per_model"] == {"small": 0, "large": len(r["output_ids"])}
    summary = json.loads((tmp_path / "single" / "summary.json").read_text())
    assert summary["model_names"] == ["large"] and summary["system"] == "single"


def _setup(**system) -> SystemSetup:
    cfg = OmegaConf.create({
        "models": {"members": [{"name": "small", "source": "Qwen/Qwen3-0.6B"}, {"name": "large", "source": "Qwen/Qwen3-32B"}]},
        "algorithm": {"name": "r2r", "threshold": 0.3},
        "runtime": {},
        "workload": {"name": "aime24"},
        "system": {"name": "official_r2r", **system},
    })
    return SystemSetup.from_config(cfg)


def _checkout(root: Path, random_routing: bool) -> Path:
    (root / "script/inference").mkdir(parents=True)
    (root / "script/inference/launch_r2r_server.py").write_text("# server\n")
    (root / "config").mkdir()
    (root / "config/Qwen3-0.6B+Qwen3-32B.yaml").write_text(json.dumps({"router": {"router_path": "x"}}))
    slm = root / official_r2r.SLM_SERVER
    slm.parent.mkdir(parents=True)
    line = "model_choices = torch.bernoulli(torch.full((len(batch.reqs),), 0.10))" if random_routing else ""
    slm.write_text(f"model_choices = router.route(model_outputs).cpu()\n{line}\n")
    return root


def test_official_r2r_not_installed_is_one_clear_error() -> None:
    with pytest.raises(UserError, match="git clone https://github.com/thu-nics/R2R"):
        official_r2r.from_setup(_setup())


def test_official_r2r_random_routing_checkout_is_refused_unless_accepted(tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "R2R", random_routing=True)
    python = "python3"
    with pytest.raises(UserError, match="random 10% routing"):
        official_r2r.from_setup(_setup(repo=str(repo), python=python))
    system = official_r2r.from_setup(_setup(repo=str(repo), python=python, on_random_routing="accept"))
    assert "random" in system.stats()["known_issue"]
    assert system.threshold == 0.3  # algorithm.threshold (an r2r sweep) before the dataset default
    assert system.config == repo / "config/Qwen3-0.6B+Qwen3-32B.yaml"


def test_official_r2r_thresholds_per_dataset(tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "R2R", random_routing=False)
    setup = _setup(repo=str(repo), python="python3")
    setup.algorithm.params.pop("threshold")
    assert official_r2r.from_setup(setup).threshold == pytest.approx(0.406, abs=1e-3)  # AIME
    assert official_r2r.dataset_threshold("gpqa") == 0.42
    assert official_r2r.dataset_threshold("amc23") == 0.5
