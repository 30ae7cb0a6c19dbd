"""What the demo concludes from its runs table (`tokenrouter.evals.store.load_results`): the summary table, the
TokenRouter-vs-lockstep pairs behind its Table 3, and whether token-level routing dominates query-level
routing on the accuracy/throughput frontier.

Why separate from tokenrouter/evals/report.py: the demo's runs mix algorithms and thresholds, so its comparisons must
pair like with like (same algorithm settings on both systems) before the generic reports aggregate them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tokenrouter.evals.headline import ratio_interval
from tokenrouter.evals.machine import contended
from tokenrouter.evals.runs_table import PER_REQUEST, THROUGHPUT, series_label
from tokenrouter.evals.tables import present

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
        if key not in NOT_SETTINGS and present(value):
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


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df else pd.Series([None] * len(df), index=df.index, dtype=object)


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run, sorted by series, setting then seed: accuracy (95% CI), strong-model token share,
    throughput (system and per request), latency and hand-offs."""
    table = pd.DataFrame(
        {
            "series": df.apply(series_label, axis=1),
            "setting": df.apply(setting, axis=1),
            "seed": _col(df, "seed"),
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
    return table.sort_values(["series", "setting", "seed"]).reset_index(drop=True)


MEANS = ["accuracy", "accuracy_ci95_low", "accuracy_ci95_high", "large_token_share", THROUGHPUT, PER_REQUEST]


def points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per plotted point (series, setting, system, N; series from a `series` column when `df` has one,
    else `series_label`): the mean over its repeats (seeds) of accuracy,
    its CI bounds, the large-model share and both throughputs, the throughputs' standard deviation (NaN for
    one repeat) and the repeat count. Why: repeats measure the noise of a shared CPU; a point is their mean."""
    series = df["series"] if "series" in df else df.apply(series_label, axis=1)  # a caller's finer legend names
    labels = pd.DataFrame({"series": series, "setting": df.apply(setting, axis=1),
                           "concurrency": _col(df, "concurrency")}, index=df.index)
    runs = pd.concat([df.drop(columns=list(labels), errors="ignore"), labels], axis=1)  # one insert, not three
    grouped = runs.groupby(["series", "setting", "system", "concurrency"], dropna=False)
    out = grouped[[c for c in MEANS if c in runs]].mean()
    for column in (THROUGHPUT, PER_REQUEST):
        if column in runs:
            out[f"{column}_std"] = grouped[column].std()
    out["repeats"] = grouped.size()
    return out.reset_index()


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
    """TokenRouter / lock-step throughput for every (algorithm, settings, N) pair: the ratio of the means over
    repeats, the ratio within each repeat (seed) that ran on both systems (whose minimum is the worst run), its
    95% interval (`tokenrouter.evals.headline.ratio_interval`; None for one repeat) and why the machine made its runs'
    timings not comparable (`tokenrouter.evals.machine`; empty when nothing is known against them)."""
    rows = []
    for (algorithm, settings, n), group in pairs.groupby(
        [pairs["algorithm"], pairs.apply(algorithm_settings, axis=1), pairs["concurrency"]]
    ):
        tput = group.groupby("system")[THROUGHPUT].mean()
        by_seed = group.assign(seed=_col(group, "seed").fillna(0)).pivot_table(
            index="seed", columns="system", values=THROUGHPUT, aggfunc="mean").dropna()
        per_seed = [float(r[TOKEN_LEVEL] / r["lockstep"]) for _, r in by_seed.iterrows() if r["lockstep"]]
        rows.append(
            {
                "algorithm": algorithm,
                "settings": settings,
                "N": int(n),
                "tokenrouter tok/s": float(tput[TOKEN_LEVEL]),
                "lockstep tok/s": float(tput["lockstep"]),
                "ratio": float(tput[TOKEN_LEVEL] / tput["lockstep"]) if tput["lockstep"] else math.nan,
                "ratio per repeat": per_seed,
                "interval": list(interval) if (interval := ratio_interval(per_seed)) else None,
                "contended": contended(group),
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
    """Whether every query-level point is weakly dominated (accuracy and `axis` both >=) by some TokenRouter
    point (points: means over repeats)."""
    if not {"accuracy", axis, "system"} <= set(df):
        return Dominance(axis=axis, query_points=0, dominated=0)
    runs = points(df).dropna(subset=["accuracy", axis])
    token = runs[runs["system"] == TOKEN_LEVEL]
    query = runs[runs["system"] == QUERY_LEVEL]
    beaten = sum(
        bool(((token["accuracy"] >= q["accuracy"]) & (token[axis] >= q[axis])).any()) for _, q in query.iterrows()
    )
    return Dominance(axis=axis, query_points=len(query), dominated=beaten)


def single_accuracies(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Accuracy of each model on its own (mean over repeats, with the mean 95% CI bounds and each repeat's
    accuracy), from the `system=single` runs."""
    out: dict[str, dict[str, Any]] = {}
    single = df[(df["system"] == "single") & df["accuracy"].notna()]
    for model, runs in single.groupby("system_model"):
        out[str(model)] = {
            "accuracy": float(runs["accuracy"].mean()),
            "ci95": [float(runs["accuracy_ci95_low"].mean()), float(runs["accuracy_ci95_high"].mean())],
            "repeats": [float(a) for a in runs["accuracy"]],
            "problems": int((runs["num_graded"] if "num_graded" in runs else runs["num_requests"]).sum()),
        }
    return out


def near_large(df: pd.DataFrame, within: float = 0.03) -> str:
    """The fastest TokenRouter point (total throughput, means over repeats) within `within` accuracy of the
    large model alone, with its speed-up over it on both throughput axes: the paper's headline claim."""
    pts = points(df)
    large = pts[(pts["system"] == "single") & (pts["large_token_share"] == 1.0)]
    if large.empty or THROUGHPUT not in pts:
        return "no large-only run measured"
    ref = large.iloc[0]
    close = pts[(pts["system"] == TOKEN_LEVEL) & (pts["accuracy"] >= ref["accuracy"] - within)]
    if close.empty:
        return f"no TokenRouter point within {within:.0%} accuracy of the large model alone ({ref['accuracy']:.1%})"
    best = close.sort_values(THROUGHPUT).iloc[-1]
    return (f"{best['series']} {best['setting']}: accuracy {best['accuracy']:.1%} vs {ref['accuracy']:.1%}, "
            f"{best[THROUGHPUT] / ref[THROUGHPUT]:.2f}x its throughput, "
            f"{best[PER_REQUEST] / ref[PER_REQUEST]:.2f}x per request")
