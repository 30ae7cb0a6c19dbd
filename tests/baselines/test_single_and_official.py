"""`system=single` (one model alone). `system=official_r2r`: tests/baselines/test_official_r2r.py."""

from __future__ import annotations

import json
from pathlib import Path

from tokenrouter.cli import main


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
