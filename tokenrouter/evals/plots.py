"""Figures of the report (seaborn on matplotlib's file backend; each saved as PNG and PDF).

Each function takes the runs table and the output folder and returns the files it wrote ([] when the runs do
not hold what the figure needs). A CSV of the plotted numbers is written next to each figure, so the figure's
claims can be checked without reading pixels.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from tokenrouter.evals.comparable import (  # noqa: E402
    closed_loop,
    config_keys,
    describe,
    distinguishing,
    key_name,
    split_series,
)
from tokenrouter.evals.demo_summary import NOT_SETTINGS  # noqa: E402
from tokenrouter.evals.left_out import leave_out  # noqa: E402
from tokenrouter.evals.runs_table import (  # noqa: E402
    PER_REQUEST,
    PREDICTED,
    STEADY,
    THROUGHPUT,
    has,
    pair_label,
    series_label,
)

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
MEASURED = "measured_tok_s"


def _save(fig: plt.Figure, out: Path, stem: str) -> list[Path]:
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def pareto_frontier(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The points no other point beats on both x and y (higher is better on both), sorted by x."""
    best, keep = float("-inf"), []
    for idx, row in points.sort_values([x, y], ascending=False).iterrows():
        if row[y] > best:
            keep.append(idx)
            best = row[y]
    return points.loc[keep].sort_values(x)


def swept(key: str) -> bool:
    """Whether a config key is a knob a Pareto series sweeps along (its points' labels,
    `tokenrouter.evals.demo_summary.setting`): the algorithm's (a router checkpoint is not: another one is another series),
    a single system's model and query-level routing's strong share."""
    if key.startswith("algorithm."):
        return key.removeprefix("algorithm.") not in NOT_SETTINGS or key == "algorithm.name"
    return key in ("system.model", "system.strong_share")


def series_across_setups(runs: pd.DataFrame) -> pd.Series:
    """Legend names that also tell model pairs, tensor-parallel settings and searches apart where a
    workload's runs span several: one frontier per (method, pair, TP, sweeper), e.g. "tokenrouter (r2r) ·
    0.6B/32B · TP 1/2", and "... · optuna_pareto search" next to "... · grid" for an Optuna study of a grid's
    points."""
    names = runs.apply(series_label, axis=1)
    for column, label in (("model_set", pair_label), ("tp", lambda tp: f"TP {tp}"), ("sweeper", search_label)):
        if column not in runs:
            continue
        varies = runs.groupby("workload")[column].transform(lambda c: c.nunique(dropna=True) > 1).astype(bool)
        names = names.where(~varies, names + " · " + runs[column].map(label))
    return names


def search_label(sweeper: object) -> str:
    """basic -> "grid", optuna_pareto -> "optuna_pareto search", none (a run outside a sweep) -> "run"."""
    if not isinstance(sweeper, str):
        return "run"
    return "grid" if sweeper == "basic" else f"{sweeper} search"


AXES = {PER_REQUEST: "per-request throughput (output tok/s, mean over requests)",
        THROUGHPUT: "total throughput (output tok/s)"}


def point_label(setting: str) -> str:
    """The setting a point is labelled with, each value beside its key (a bare `0,0.9` reads as one decimal
    number): `threshold=0.5`, a searched `threshold=0.8134184006256638` -> `threshold=0.813`,
    `p01=0,p10=0.9` -> `p01=0, p10=0.9` (single models: none, their legend names the model)."""
    if not setting or setting.startswith("model="):
        return ""
    parts = [part.split("=", 1) for part in setting.split(",")]
    return ", ".join(f"{kv[0]}={_short(kv[1])}" if len(kv) == 2 else _short(kv[0]) for kv in parts)


def _short(value: str) -> str:
    try:
        return f"{float(value):.3g}" if "." in value else value
    except ValueError:
        return value


def pareto_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Accuracy vs throughput (per request, and total when measured), one figure per workload
    (`pareto_<workload>`). A point is the mean over its repeats (seeds), with the throughput's standard
    deviation and the accuracy's mean 95% CI as error bars, labelled with its swept value; each series has one
    colour and marker (one legend) and its own frontier line, and the dashed line is the frontier across all."""
    from tokenrouter.evals.demo_summary import points as mean_points

    runs = has(df, "accuracy", PER_REQUEST, "system").copy()
    if len(runs) < 2:
        return []
    runs["workload"] = runs["workload"].fillna("workload")
    # a line joins one series' swept points: runs that differ in anything but the swept knob are other series
    keys = [k for k in config_keys(runs) if not swept(key_name(k))]
    runs["series"] = split_series(runs, series_across_setups(runs), ["workload"], keys=keys)
    written = []
    for workload, group in runs.groupby("workload"):
        pts = mean_points(group)
        series = sorted(pts["series"].unique())
        palette = dict(zip(series, sns.color_palette("tab10", len(series)), strict=True))
        markers = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(series)}
        axes_used = [a for a in AXES if a in pts and pts[a].notna().any()]
        with sns.axes_style("whitegrid"):
            fig, axes = plt.subplots(1, len(axes_used), figsize=(6.2 * len(axes_used), 5), squeeze=False,
                                     sharey=True)
            for ax, x in zip(axes[0], axes_used, strict=True):
                _pareto_axes(ax, pts.dropna(subset=[x]), x, palette, markers)
            handles, labels = axes[0][0].get_legend_handles_labels()
            fig.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.93))
            fig.suptitle(_pareto_title(group, pts, workload), fontsize=10)
            fig.tight_layout()
            stem = f"pareto_{workload}"
            pts.to_csv(out / f"{stem}.csv", index=False)
            written += [out / f"{stem}.csv", *_save(fig, out, stem)]
    return written


def _pareto_axes(ax: plt.Axes, pts: pd.DataFrame, x: str, palette: dict, markers: dict) -> None:
    for name, group in pts.groupby("series"):
        err_y = [group["accuracy"] - group.get("accuracy_ci95_low", group["accuracy"]),
                 group.get("accuracy_ci95_high", group["accuracy"]) - group["accuracy"]]
        ax.errorbar(group[x], group["accuracy"], xerr=group.get(f"{x}_std"), yerr=err_y, fmt=markers[name],
                    color=palette[name], ecolor=palette[name], elinewidth=0.8, capsize=2, ms=7, label=name,
                    alpha=0.9)
        front = pareto_frontier(group, x, "accuracy")
        ax.plot(front[x], front["accuracy"], color=palette[name], lw=1.2, alpha=0.6)
        for _, row in group.iterrows():
            text = point_label(str(row["setting"]))
            if text:
                ax.annotate(text, (row[x], row["accuracy"]), xytext=(4, 4), textcoords="offset points", fontsize=7,
                            color=palette[name])
    overall = pareto_frontier(pts, x, "accuracy")
    ax.plot(overall[x], overall["accuracy"], "k--", lw=1, alpha=0.5, label="frontier (all systems)")
    ax.set_xlabel(AXES[x])
    ax.set_ylabel("accuracy")


def _pareto_title(runs: pd.DataFrame, pts: pd.DataFrame, workload: str) -> str:
    """`Accuracy vs throughput: arith, pair tiny, N=8, 3 repeats per point (error bars: ...)`."""
    parts = [f"Accuracy vs throughput: {workload}"]
    if "models" in runs and runs["models"].nunique() == 1:
        parts.append(f"pair {pair_label(runs['models'].iloc[0])}")
    if "concurrency" in runs and runs["concurrency"].nunique() == 1:
        parts.append(f"N={runs['concurrency'].iloc[0]}")
    parts.append(f"{int(pts['repeats'].max())} repeat(s) per point")
    return ", ".join(parts) + "\n(error bars: throughput std over repeats, accuracy mean 95% CI; labels: swept setting)"


def threshold_validation_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Measured vs predicted throughput over the large model's threshold, one panel per configuration and
    concurrency N (a row of panels per configuration, when runs of several are given). Measured is the steady
    (closed-loop, no drain tail) throughput where the runs have it: the model has no tail."""
    # the threshold axis: runs that ran with thresholds (a lock-step run has none; it has no such knob)
    runs = has(df, PREDICTED, THROUGHPUT, "concurrency", "threshold_large").copy()
    if runs.empty:
        return []
    runs["threshold"] = runs["threshold_large"].astype(int)  # thresholds are counts: 2, not 2.0
    # the axis is the thresholds a run used: fixed ones, or a plan's (auto), which are other runs' settings
    runs["cfg.runtime.thresholds"] = runs.get("cfg.runtime.thresholds", pd.Series("auto", index=runs.index)).map(
        lambda t: "auto" if t == "auto" else "fixed")
    shown = distinguishing(runs, [], config_keys(runs, without=("concurrency",)))
    runs["setting"] = runs.apply(lambda r: describe(r, shown), axis=1) if shown else ""
    steady = STEADY in runs and runs[STEADY].notna().all()
    runs[MEASURED] = runs[STEADY] if steady else runs[THROUGHPUT]
    table = runs.groupby(["setting", "concurrency", "threshold"], as_index=False)[[MEASURED, PREDICTED]].mean()
    axis = table.groupby(["setting", "concurrency"])["threshold"].transform("nunique") >= 2
    alone = runs.set_index(["setting", "concurrency"]).index.isin(
        table[~axis].set_index(["setting", "concurrency"]).index)
    leave_out("threshold_validation", runs[alone], "one threshold only at their configuration and N")
    table = table[axis].reset_index(drop=True)
    if table.empty:
        return []  # no threshold axis: nothing to validate the threshold choice against
    table["rel_error"] = (table[PREDICTED] - table[MEASURED]) / table[MEASURED]
    settings = sorted(table["setting"].unique())
    ns = sorted(table["concurrency"].unique())
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(len(settings), len(ns), figsize=(4.2 * len(ns), 3.8 * len(settings)),
                                 squeeze=False)
        for row, setting in enumerate(settings):
            for ax, n in zip(axes[row], ns, strict=True):
                g = table[(table["setting"] == setting) & (table["concurrency"] == n)].sort_values("threshold")
                if g.empty:
                    ax.set_visible(False)
                    continue
                _validation_axes(ax, g, int(n), setting, steady)
        fig.suptitle(f"Threshold validation: {_setting_title(runs)} (labels: predicted vs measured, relative error)",
                     fontsize=9)
        fig.tight_layout()
    table = table.drop(columns="setting") if not shown else table
    table.to_csv(out / "threshold_validation.csv", index=False)
    return [out / "threshold_validation.csv", *_save(fig, out, "threshold_validation")]


def _validation_axes(ax: plt.Axes, g: pd.DataFrame, n: int, setting: str, steady: bool) -> None:
    x = g["threshold"]
    ax.plot(x, g[MEASURED], "o-", label="measured (steady)" if steady else "measured")
    ax.plot(x, g[PREDICTED], "s--", label="predicted")
    for xi, yi, err in zip(x, g[PREDICTED], g["rel_error"], strict=True):
        ax.annotate(f"{err:+.0%}", (xi, yi), xytext=(0, 5), textcoords="offset points", ha="center", fontsize=7)
    ax.set_ylim(bottom=0)  # from zero: a panel's own range would make a 2% gap look large
    ax.set_xticks(list(x))
    best_m = g.loc[g[MEASURED].idxmax(), "threshold"]
    best_p = g.loc[g[PREDICTED].idxmax(), "threshold"]
    ax.set_title(f"N={n}: best B measured {best_m}, predicted {best_p}" + (f"\n{setting}" if setting else ""),
                 fontsize=8 if setting else 9)
    ax.set_xlabel("large-model threshold B")
    ax.set_ylabel("throughput (tok/s)")
    ax.legend(fontsize=8)


def _setting_title(runs: pd.DataFrame) -> str:
    """`pair tiny, arith, r2r`: the model pair, workload and algorithm the runs share (those that vary: left out)."""
    parts = []
    for column, fmt in (("models", lambda v: f"pair {pair_label(v)}"), ("workload", str), ("algorithm", str),
                        ("system", str)):
        if column in runs and runs[column].nunique() == 1:
            parts.append(fmt(runs[column].iloc[0]))
    return ", ".join(parts) or "all runs"


def axis_series(runs: pd.DataFrame, axis: str, report: str) -> pd.DataFrame:
    """The runs with a `series` name each (split wherever runs of a name differ in a config key other than
    `axis`), keeping the series measured at two or more `axis` values; the others are left out, saying so."""
    if runs.empty:
        return runs
    runs = runs.assign(series=split_series(runs, runs.apply(series_label, axis=1), along=(axis,)))
    several = runs.groupby("series")[axis].transform("nunique") >= 2
    leave_out(report, runs[~several], f"their series (system, algorithm and config) ran at one {axis} only")
    return runs[several]


def concurrency_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Throughput vs concurrency N per series, and each request's own speed relative to the smallest N."""
    runs = axis_series(closed_loop(has(df, THROUGHPUT, "concurrency", "system"), "concurrency"), "concurrency",
                       "concurrency")
    if runs.empty:
        return []
    columns = [c for c in (THROUGHPUT, PER_REQUEST) if c in runs]
    table = (
        runs.groupby(["series", "concurrency"], as_index=False)[columns]
        .mean()
        .sort_values(["series", "concurrency"])
    )
    first = table.groupby("series").transform("first")
    table["throughput_scale"] = table[THROUGHPUT] / first[THROUGHPUT]
    if PER_REQUEST in table:
        table["per_request_kept"] = table[PER_REQUEST] / first[PER_REQUEST]
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        sns.lineplot(data=table, x="concurrency", y=THROUGHPUT, hue="series", marker="o", ax=axes[0])
        axes[0].set_ylabel("throughput (tok/s)")
        if "per_request_kept" in table:
            sns.lineplot(
                data=table,
                x="concurrency",
                y="per_request_kept",
                hue="series",
                marker="o",
                ax=axes[1],
                legend=False,
            )
        axes[1].set_ylabel("per-request speed / speed at smallest N")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent requests N")
    table.to_csv(out / "concurrency.csv", index=False)
    return [out / "concurrency.csv", *_save(fig, out, "concurrency")]


# Open-loop load panels, as `vllm bench sweep` draws them: (median column, p99 column or None, y label)
LOAD_PANELS = [(THROUGHPUT, None, "achieved throughput (tok/s)"),
               ("median_ttft_ms", "p99_ttft_ms", "TTFT (ms): p50 solid, p99 dashed"),
               ("median_tpot_ms", "p99_tpot_ms", "TPOT (ms): p50 solid, p99 dashed"),
               ("request_goodput", None, "goodput under the SLOs (requests/s)")]


def load_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Open-loop load curves against the offered request rate (arrival=poisson), one line per series: achieved
    throughput, p50/p99 TTFT and TPOT, and goodput under the configured SLOs (when `slo.*` was set); load.csv
    also holds mean / p99 latency and mean TTFT."""
    runs = axis_series(has(df, "request_rate", "mean_latency_s", THROUGHPUT, "system"), "request_rate", "load")
    if runs.empty:
        return []
    columns = [c for c in (THROUGHPUT, "mean_latency_s", "p99_latency_s", "mean_ttft_s", "median_ttft_ms",
                           "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "request_goodput") if c in runs]
    table = runs.groupby(["series", "request_rate"], as_index=False)[columns].mean()
    table = table.sort_values(["series", "request_rate"])
    panels = [p for p in LOAD_PANELS if p[0] in table and table[p[0]].notna().any()]
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
        palette = dict(zip(table["series"].unique(), sns.color_palette("tab10"), strict=False))
        for ax, (median, p99, label) in zip(axes[0], panels, strict=True):
            for name, g in table.groupby("series"):
                ax.plot(g["request_rate"], g[median], "o-", color=palette[name], label=name)
                if p99 is not None and p99 in g:
                    ax.plot(g["request_rate"], g[p99], "s--", color=palette[name], label=f"{name} p99")
            ax.set_xlabel("offered load (requests/s, Poisson)")
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
        axes[0][0].legend(fontsize=8)
    table.to_csv(out / "load.csv", index=False)
    return [out / "load.csv", *_save(fig, out, "load")]


def query_level_plot(metrics: pd.DataFrame, curves: pd.DataFrame, out: Path) -> list[Path]:
    """Accuracy vs strong-model share for query-level and token-level routing on the same axes, with the
    weak-only / strong-only accuracies and the random-mix line between them."""
    groups = list(metrics.groupby(["workload", "models"]))
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.2), squeeze=False)
        for ax, ((workload, models), m) in zip(axes[0], groups, strict=True):
            weak, strong = m["weak acc"].iloc[0], m["strong acc"].iloc[0]
            ax.plot([0, 1], [weak, strong], ":", color="grey", label="random mix")
            for level, name in ((weak, "weak only"), (strong, "strong only")):
                ax.axhline(level, color="grey", lw=0.8)
                ax.annotate(
                    name, (1.0, level), xytext=(-4, 3), textcoords="offset points", ha="right", fontsize=8
                )
            for _, row in m.iterrows():
                pts = curves[
                    (curves["workload"] == workload)
                    & (curves["models"] == models)
                    & (curves["method"] == row["method"])
                ]
                pts = pts.sort_values("share")
                style = {"query": "s--", "oracle": "k-."}.get(row["routing"], "o-")
                ax.plot(
                    pts["share"], pts["accuracy"], style, label=f"{row['method']} (APGR {row['APGR']:.2f})"
                )
            ax.set_xlim(-0.02, 1.02)
            ax.set_xlabel("strong-model share (tokens)")
            ax.set_ylabel("accuracy")
            ax.set_title(f"{workload}, {models}", fontsize=9)
            ax.legend(fontsize=8)
    return _save(fig, out, "query_level")
