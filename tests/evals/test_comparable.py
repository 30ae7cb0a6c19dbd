"""Which runs reports may compare (tokenrouter/evals/comparable.py) on small runs tables, and the left-out notes."""

from __future__ import annotations

import pandas as pd
import pytest

from tokenrouter.evals import left_out
from tokenrouter.evals.comparable import (
    closed_loop,
    compare_systems,
    config_keys,
    distinguishing,
    place,
    sort_rows,
    split_series,
)


def table(*rows: dict) -> pd.DataFrame:
    base = {"cfg.seed": 0, "cfg.concurrency": 4, "cfg.arrival": "closed_loop", "cfg.algorithm.threshold": 0.5,
            "cfg.runtime.max_wait_ms": 50.0, "cfg.server.port": 8000, "cfg.experiment_name": None}
    return pd.DataFrame([{**base, "run_dir": f"/runs/sweep/run{i}", **r} for i, r in enumerate(rows)])


def test_config_keys_leave_out_what_never_changes_a_measurement() -> None:
    df = table({"cfg.runtime.trace": True, "cfg.system.startup_timeout_s": 10, "cfg.resume": "check",
                "cfg.workload.name": "amc23", "cfg.models.name": "tiny", "cfg.zeta": 1})
    assert config_keys(df) == ["cfg.workload.name", "cfg.algorithm.threshold", "cfg.concurrency", "cfg.arrival",
                               "cfg.runtime.max_wait_ms", "cfg.models.name", "cfg.zeta"]
    assert config_keys(df, without=("concurrency", "runtime.")) == [
        "cfg.workload.name", "cfg.algorithm.threshold", "cfg.arrival", "cfg.models.name", "cfg.zeta"]


def test_distinguishing_names_a_key_only_when_it_tells_runs_apart() -> None:
    df = table({"cfg.algorithm.threshold": 0.3, "cfg.helper": "a"}, {"cfg.algorithm.threshold": 0.6, "cfg.helper": "b"},
               {"cfg.algorithm.threshold": 0.6, "cfg.helper": "b", "cfg.runtime.max_wait_ms": 5.0},
               {"cfg.algorithm.threshold": 0.6, "cfg.helper": "b", "cfg.seed": 1})
    # helper follows the threshold; the seed is a repeat; a missing value is a value of its own
    assert distinguishing(df, [], config_keys(df)) == ["cfg.algorithm.threshold", "cfg.runtime.max_wait_ms"]
    assert distinguishing(df, ["cfg.algorithm.threshold"], ["cfg.runtime.max_wait_ms"]) == ["cfg.runtime.max_wait_ms"]
    gap = table({}, {"cfg.workload.limit": 8})
    assert distinguishing(gap, [], config_keys(gap)) == ["cfg.workload.limit"]


def test_split_series_names_only_what_sets_each_series_apart() -> None:
    df = table({"cfg.workload.name": "a"}, {"cfg.workload.name": "a", "cfg.concurrency": 8},
               {"cfg.workload.name": "b"}, {"cfg.workload.name": "b", "cfg.runtime.max_wait_ms": 5.0},
               {"cfg.workload.name": "c"})
    names = split_series(df, pd.Series(["tr"] * 4 + ["other"]), along=("concurrency",))
    assert list(names) == ["tr · workload.name=a", "tr · workload.name=a",
                           "tr · workload.name=b · runtime.max_wait_ms=50.0", "tr · workload.name=b · runtime.max_wait_ms=5.0",
                           "other"]


def test_compare_systems_pairs_like_with_like_and_says_what_it_left_out(capsys: pytest.CaptureFixture) -> None:
    df = table({"system": "tokenrouter"}, {"system": "tokenrouter", "cfg.seed": 1},
               {"system": "lockstep"}, {"system": "official_r2r", "cfg.system.threshold": 0.4},
               {"system": "official_r2r", "cfg.system.threshold": 0.5},
               {"system": "tokenrouter", "cfg.algorithm.threshold": 0.9},
               {"system": "lockstep", "cfg.runtime.max_wait_ms": 1.0, "cfg.algorithm.threshold": 0.1})
    with left_out.collecting() as notes:
        (a, b) = compare_systems(df, "tokenrouter", ("lockstep", "official_r2r"), "t")
    assert len(a.groups["tokenrouter"]) == 2 and len(a.groups["lockstep"]) == 1  # the seeds are repeats
    assert {a.variants["official_r2r"], b.variants["official_r2r"]} == {"system.threshold=0.4", "system.threshold=0.5"}
    assert [(n.report, n.runs) for n in notes] == [("t", 1), ("t", 1)]
    assert notes[0].why == ("tokenrouter: no lockstep/official_r2r run of the same configuration (nearest differs in "
                            "algorithm.threshold)") and notes[0].examples == "sweep/run5"
    assert "nearest differs in algorithm.threshold)" in notes[1].why  # lock-step reads no runtime.max_wait_ms
    assert capsys.readouterr().err.count("\n") == 2  # one stderr line per note, while collecting too


def test_open_loop_runs_are_left_out_of_throughput_comparisons(capsys: pytest.CaptureFixture) -> None:
    df = table({}, {"cfg.arrival": "poisson"})
    assert list(closed_loop(df, "t").index) == [0]
    assert "t: left out 1 run(s): open loop (arrival=poisson)" in capsys.readouterr().err


def test_sort_rows_numbers_as_numbers() -> None:
    rows = pd.DataFrame({"N": [16, 4, 8], "k": ["b", "a", "c"]})
    assert list(sort_rows(rows, ["N"])["N"]) == [4, 8, 16]
    assert list(sort_rows(pd.DataFrame({"v": ["--", 0.5, 0.25]}), ["v"])["v"]) == ["--", 0.25, 0.5]  # mixed: as text


def test_a_key_a_system_never_reads_does_not_set_its_runs_apart(capsys: pytest.CaptureFixture) -> None:
    """One lock-step run is the baseline of TokenRouter runs at every max_wait_ms and delayed_batching (it has
    neither), an official R2R run of every runtime.* setting; a key lock-step reads (max_batch_size) still
    splits, naming only that key."""
    df = table({"system": "tokenrouter"}, {"system": "tokenrouter", "cfg.runtime.max_wait_ms": 5.0},
               {"system": "tokenrouter", "cfg.runtime.delayed_batching": False},
               {"system": "lockstep", "cfg.runtime.max_wait_ms": 1.0},
               {"system": "official_r2r", "cfg.runtime.max_batch_size": 8},
               {"system": "lockstep", "cfg.runtime.max_batch_size": 8})
    df["cfg.runtime.delayed_batching"] = df["cfg.runtime.delayed_batching"].astype(object).fillna(True)
    df["cfg.runtime.max_batch_size"] = df["cfg.runtime.max_batch_size"].fillna(256)
    placed = place(df, config_keys(df, without=("system.",)))
    copies = placed[placed["run_dir"] == "/runs/sweep/run3"]  # lock-step's run, once per TokenRouter setting
    assert sorted(copies["cfg.runtime.max_wait_ms"]) == [5.0, 50.0, 50.0]
    assert sorted(copies["cfg.runtime.delayed_batching"].astype(str)) == ["False", "True", "True"]
    assert set(copies["_setting"]) == set(placed[placed["system"] == "tokenrouter"]["_setting"])
    with left_out.collecting() as notes:
        comparisons = compare_systems(df, "tokenrouter", ("lockstep", "official_r2r"), "t")
    assert len(comparisons) == 3
    for c in comparisons:
        assert list(c.groups["lockstep"]["run_dir"]) == ["/runs/sweep/run3"]
        assert list(c.groups["official_r2r"]["run_dir"]) == ["/runs/sweep/run4"]
        assert c.setting["cfg.runtime.max_wait_ms"] == c.groups["tokenrouter"].iloc[0]["cfg.runtime.max_wait_ms"]
    assert [(n.runs, n.why) for n in notes] == [
        (1, "lockstep: no tokenrouter run of the same configuration (nearest differs in runtime.max_batch_size)")]
    assert notes[0].examples == "sweep/run5"
