"""What the demo concludes from its runs table (`evals.store.load_results`): the summary table, the
TokenRouter-vs-lockstep pairs behind its Table 3, and whether token-level routing dominates query-level
routing on the accuracy/throughput frontier.

Why separate from evals/report.py: the demo's runs mix algorithms and thresholds, so its comparisons must
pair like with like (same algorithm settings on both systems) before the generic reports aggregate them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from evals.runs_table import PER_REQUEST, THROUGHPUT, series_label

TOKEN_LEVEL = "tokenrouter"
QUERY_LEVEL = "query_routing"
# algorithm fields that say which router is used rather than how it is set
NOT_SETTINGS = {"name", "router"}


def algorithm_settings(row: pd.Series) -> str:
    """`threshold=0.5`, `tau=0.1`, ...: the algorithm's knobs that are set in this run (router path excluded)."""
    parts = []
    for column, value in row.items():
        if not str(column).startswith("cfg.algorithm."):
            continue
        key = str(column).removeprefix("cfg.algorithm.")
        if key not in NOT_SETTINGS and _present(value):
            parts.append(f"{key}={value}")
    return ",".join(sorted(parts))


def setting(row: pd.Series) -> str:
    """The knob that places a run on its series: the single model, the strong share or the algorithm's knobs."""
    system = row.get("system")
    if system == "single":
        return f"model={row.get('system_model')}"
    if system == QUERY_LEVEL:
        return f"strong_share={row.get('strong_share')}"
    return algorithm_settings(row)


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df else pd.Series([None] * len(df), index=df.index, dtype=object)


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run, sorted by series then setting: accuracy (95% CI), strong-model token share,
    throughput (system and per request), latency and hand-offs."""
    table = pd.DataFrame(
        {
            "series": df.apply(series_label, axis=1),
            "setting": df.apply(setting, axis=1),
            "N": _col(df, "concurrency"),
            "requests": _col(df, "num_requests"),
            "accuracy": _col(df, "accuracy"),
            "acc 95% low": _col(df, "accuracy_ci95_low"),
            "acc 95% high": _col(df, "accuracy_ci95_high"),
            "large token share": _col(df, "large_token_share"),
            "throughput tok/s": _col(df, THROUGHPUT),
            "per-request tok/s": _col(df, PER_REQUEST),
            "mean latency s": _col(df, "mean_latency_s"),
            "hand-offs / request": _col(df, "handoffs_per_request"),
        }
    )
    return table.sort_values(["series", "setting"]).reset_index(drop=True)


def lockstep_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """The lock-step runs and the TokenRouter runs with the same algorithm, settings and N (what Table 3
    compares); empty when no lock-step run has a TokenRouter twin."""
    runs = df[df["system"].isin(["lockstep", TOKEN_LEVEL])].copy()
    if runs.empty:
        return runs
    runs["_key"] = runs.apply(lambda r: (r.get("algorithm"), algorithm_settings(r), r.get("concurrency")), axis=1)
    both = runs.groupby("_key")["system"].transform("nunique") == 2
    return runs[both].drop(columns="_key")


def throughput_ratios(pairs: pd.DataFrame) -> list[dict[str, Any]]:
    """TokenRouter / lock-step throughput for every (algorithm, settings, N) pair."""
    rows = []
    for (algorithm, settings, n), group in pairs.groupby(
        [pairs["algorithm"], pairs.apply(algorithm_settings, axis=1), pairs["concurrency"]]
    ):
        tput = group.groupby("system")[THROUGHPUT].mean()
        rows.append(
            {
                "algorithm": algorithm,
                "settings": settings,
                "N": int(n),
                "tokenrouter tok/s": float(tput[TOKEN_LEVEL]),
                "lockstep tok/s": float(tput["lockstep"]),
                "ratio": float(tput[TOKEN_LEVEL] / tput["lockstep"]) if tput["lockstep"] else math.nan,
            }
        )
    return rows


@dataclass
class Dominance:
    """How query-level points fare against token-level (TokenRouter) points on one throughput axis."""

    axis: str
    query_points: int
    dominated: int  # query-level points matched or beaten on both accuracy and throughput by a TokenRouter run

    @property
    def verdict(self) -> str:
        if not self.query_points:
            return "no query-level points measured"
        if self.dominated == self.query_points:
            return f"token-level routing dominates: all {self.query_points} query-level points are matched or beaten"
        return (
            f"token-level routing does not dominate: {self.dominated} of {self.query_points} query-level points "
            "are matched or beaten on both accuracy and throughput"
        )


def dominance(df: pd.DataFrame, axis: str = PER_REQUEST) -> Dominance:
    """Whether every query-level run is weakly dominated (accuracy and `axis` both >=) by some TokenRouter run."""
    if not {"accuracy", axis, "system"} <= set(df):
        return Dominance(axis=axis, query_points=0, dominated=0)
    runs = df.dropna(subset=["accuracy", axis])
    token = runs[runs["system"] == TOKEN_LEVEL]
    query = runs[runs["system"] == QUERY_LEVEL]
    beaten = sum(
        bool(((token["accuracy"] >= q["accuracy"]) & (token[axis] >= q[axis])).any()) for _, q in query.iterrows()
    )
    return Dominance(axis=axis, query_points=len(query), dominated=beaten)


def single_accuracies(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Accuracy (with its 95% CI) of each model on its own, from the `system=single` runs."""
    out: dict[str, dict[str, float]] = {}
    for _, row in df[df["system"] == "single"].iterrows():
        if _present(row.get("accuracy")):
            out[str(row["system_model"])] = {
                "accuracy": float(row["accuracy"]),
                "ci95": [float(row.get("accuracy_ci95_low")), float(row.get("accuracy_ci95_high"))],
                "problems": int(row.get("num_graded") or row.get("num_requests") or 0),
            }
    return out
