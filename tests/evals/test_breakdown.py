"""The reports of the baselines on real servers: Std. Serving's per-step breakdown (Table 10) and the systems
side by side with TokenRouter's ratio and output agreement, from run dirs laid out as `bench` leaves them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.evals.test_report import make_run
from tokenrouter.evals.report import write_reports
from tokenrouter.evals.store import load_results


def _std(server: str, dispatch: float, stages: bool) -> dict:
    cost = {"dispatch": dispatch, "http_round_trip": dispatch - 2, "server_handling": 10.0, "client_http_json": 5.0,
            "dispatcher_routing": 2.0, "model_step": 4.0, "server_bookkeeping": 6.0}
    if stages:
        cost.update(sglang_get_next_batch_to_run=1.5, sglang_process_batch_result=2.5, sglang_scheduler=5.0,
                    sglang_tokenizer_ipc=1.0)
    return {"throughput_tok_s": 50.0, "accuracy": 0.5, "large_token_share": 0.1,
            "stats": {"system": "std_serving", "server": server, "models": {"small": {"per_token_ms": cost}}}}


def test_breakdown_and_side_by_side(tmp_path: Path) -> None:
    common = {"experiment_name": "sglang_baselines", "workload": "arith", "models": "tiny"}
    make_run(tmp_path, "tokenrouter", summary={"throughput_tok_s": 200.0, "accuracy": 0.5}, **common)
    make_run(tmp_path, "std", system="std_serving", summary=_std("tokenrouter", 20.0, False), **common)
    sgl = make_run(tmp_path, "std_sglang", system="std_serving", system_fields={"server": "sglang"},
                   summary=_std("sglang", 40.0, True), **common)
    (sgl / "requests.jsonl").write_text(json.dumps({"index": 0, "output_ids": [1, 3]}) + "\n")
    out = tmp_path / "report"
    write_reports(load_results([tmp_path]), out)

    side = (out / "sglang_baselines.csv").read_text()
    assert "std_serving (r2r) on SGLang,sglang" in side and ",0/1" in side  # outputs differ at token 2
    table = pd.read_csv(out / "sglang_baselines.csv")
    ratio = table.set_index("system")["TokenRouter x"]
    assert ratio["std_serving (r2r) on SGLang"] == pytest.approx(4.0) and ratio["tokenrouter (r2r)"] == 1.0

    cost = pd.read_csv(out / "std_serving_breakdown.csv").set_index("server")
    assert cost.loc["sglang", "scheduler other"] == pytest.approx(1.0)  # 5.0 minus the two named stages
    assert cost.loc["sglang", "inference %"] == pytest.approx(10.0)
    assert pd.isna(cost.loc["sglang", "server other"]) and cost.loc["tokenrouter", "server other"] == 6.0
    assert cost.loc["sglang (paper, GPU)", "step ms"] == 37.2

