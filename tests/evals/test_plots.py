"""Legend series of the frontier plots: one frontier per method, model pair and TP setting, named only by
what varies within a workload."""

from __future__ import annotations

import pandas as pd

from tokenrouter.evals.plots import pareto_plot, series_across_setups


def _runs(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame([{"system": "tokenrouter", "algorithm": "r2r", "workload": w, "model_set": m, "tp": tp}
                         for w, m, tp in rows])


def test_series_name_pairs_and_tp_only_where_they_vary() -> None:
    runs = _runs([("amc23", "qwen3-0.6b-32b", "1/1"), ("amc23", "qwen3-0.6b-32b", "1/2"),
                  ("amc23", "qwen3-1.7b-8b", "1/1"), ("gsm8k", "qwen3-0.6b-8b", "1/2")])
    assert list(series_across_setups(runs)) == [
        "tokenrouter (r2r) · 0.6B/32B · TP 1/1",
        "tokenrouter (r2r) · 0.6B/32B · TP 1/2",
        "tokenrouter (r2r) · 1.7B/8B · TP 1/1",
        "tokenrouter (r2r)",  # one pair and one TP setting on this workload: nothing to tell apart
    ]


def test_tp_sweep_runs_get_a_frontier_per_tp_setting(tmp_path) -> None:
    df = _runs([("arith", "tiny", "1/1"), ("arith", "tiny", "1/1"), ("arith", "tiny", "1/2"), ("arith", "tiny", "1/2")])
    df["experiment"] = "tp_sweep_cpu"
    df["accuracy"] = [0.5, 0.3, 0.5, 0.3]
    df["per_request_throughput_tok_s"] = [60.0, 80.0, 30.0, 50.0]
    df["run_dir"] = [f"r{i}" for i in range(4)]
    written = pareto_plot(df, tmp_path)
    table = pd.read_csv(tmp_path / "pareto_arith.csv")
    assert set(table["series"]) == {"tokenrouter (r2r) · TP 1/1", "tokenrouter (r2r) · TP 1/2"}
    assert (tmp_path / "pareto_arith.png") in written


def test_a_search_gets_its_own_frontier_next_to_the_grids(tmp_path) -> None:
    df = _runs([("amc23", "qwen3-0.6b-32b", "1/2")] * 5)
    df["experiment"] = ["pareto_amc23"] * 3 + ["pareto_amc23_optuna"] * 2
    df["sweeper"] = ["basic"] * 3 + ["optuna_pareto"] * 2
    df["accuracy"] = [0.5, 0.4, 0.3, 0.45, 0.35]
    df["per_request_throughput_tok_s"] = [10.0, 20.0, 30.0, 15.0, 25.0]
    df["run_dir"] = [f"r{i}" for i in range(5)]
    df["cfg.algorithm.threshold"] = [0.3, 0.5, 0.7, 0.4, 0.6]  # each run its own point
    pareto_plot(df, tmp_path)
    table = pd.read_csv(tmp_path / "pareto_amc23.csv")
    assert sorted(table["series"]) == ["tokenrouter (r2r) · grid"] * 3 + ["tokenrouter (r2r) · optuna_pareto search"] * 2
    assert list(series_across_setups(df.assign(sweeper="basic"))) == ["tokenrouter (r2r)"] * 5  # grids only


def test_point_labels_are_short() -> None:
    from tokenrouter.evals.plots import point_label

    assert point_label("threshold=0.8134184006256638") == "threshold=0.813"
    assert point_label("threshold=0.5") == "threshold=0.5" and point_label("tau=0.003,n=8") == "tau=0.003, n=8"
    # keys kept: a bare `0,0.9` reads as one decimal number
    assert point_label("p01=0,p10=0.9") == "p01=0, p10=0.9" and point_label("route_prob=0.9") == "route_prob=0.9"
    assert point_label("model=large") == "" and point_label("router=random") == "router=random"
    assert point_label("") == ""
