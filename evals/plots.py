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

from evals.runs_table import PER_REQUEST, PREDICTED, STEADY, THROUGHPUT, has, pair_label, select, series_label  # noqa: E402

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


def pareto_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Accuracy vs per-request throughput, one marker style per system, one frontier line per series; one
    figure per workload (`pareto_<workload>`)."""
    studies = pd.concat([select(df, "pareto"), select(df, "tp_sweep")])
    runs = has(studies[~studies.index.duplicated()], "accuracy", PER_REQUEST, "system").copy()
    if len(runs) < 2:
        return []
    runs["workload"] = runs["workload"].fillna("workload")
    runs["series"] = series_across_setups(runs)
    series = sorted(runs["series"].unique())
    palette = dict(zip(series, sns.color_palette("tab10", len(series)), strict=True))
    markers = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(sorted(runs["system"].unique()))}
    written = []
    for workload, group in runs.groupby("workload"):
        with sns.axes_style("whitegrid"):
            fig, ax = plt.subplots(figsize=(7.5, 5))
            for name, points in group.groupby("series"):
                if {"accuracy_ci95_low", "accuracy_ci95_high"} <= set(points):
                    err = [
                        points["accuracy"] - points["accuracy_ci95_low"],
                        points["accuracy_ci95_high"] - points["accuracy"],
                    ]
                    ax.errorbar(
                        points[PER_REQUEST],
                        points["accuracy"],
                        yerr=err,
                        fmt="none",
                        ecolor=palette[name],
                        alpha=0.25,
                    )
                front = pareto_frontier(points, PER_REQUEST, "accuracy")
                ax.plot(front[PER_REQUEST], front["accuracy"], color=palette[name], lw=1.4, alpha=0.8)
            sns.scatterplot(
                data=group,
                x=PER_REQUEST,
                y="accuracy",
                hue="series",
                style="system",
                palette=palette,
                markers=markers,
                s=70,
                ax=ax,
            )
            ax.set_xlabel("per-request throughput (output tokens / s, mean over requests)")
            ax.set_ylabel("accuracy")
            ax.set_title(f"Accuracy vs throughput: {workload} (lines: Pareto frontier per series)")
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never hides points
            stem = f"pareto_{workload}"
            group[["series", "system", "algorithm", PER_REQUEST, "accuracy", "run_dir"]].to_csv(
                out / f"{stem}.csv", index=False
            )
            written += [out / f"{stem}.csv", *_save(fig, out, stem)]
    return written


def threshold_validation_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Measured vs predicted throughput over the large model's threshold, one panel per concurrency N. Measured
    is the steady (closed-loop, no drain tail) throughput where the runs have it: the model has no tail."""
    runs = has(select(df, "threshold_validation"), PREDICTED, THROUGHPUT, "concurrency").copy()
    if runs.empty:
        return []
    runs["threshold"] = runs["threshold_large"].where(runs["threshold_large"].notna(), runs["thresholds"])
    if pd.api.types.is_numeric_dtype(runs["threshold"]):
        runs["threshold"] = runs["threshold"].astype(int)  # thresholds are counts: 2, not 2.0
    steady = STEADY in runs and runs[STEADY].notna().all()
    runs[MEASURED] = runs[STEADY] if steady else runs[THROUGHPUT]
    table = runs.groupby(["concurrency", "threshold"], as_index=False)[[MEASURED, PREDICTED]].mean()
    if table.groupby("concurrency")["threshold"].nunique().max() < 2:
        return []  # no threshold axis: nothing to validate the threshold choice against
    table["rel_error"] = (table[PREDICTED] - table[MEASURED]) / table[MEASURED]
    ns = sorted(table["concurrency"].unique())
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns), 3.8), squeeze=False)
        for ax, n in zip(axes[0], ns, strict=True):
            g = table[table["concurrency"] == n].sort_values("threshold")
            x = g["threshold"].astype(str) if g["threshold"].dtype == object else g["threshold"]
            ax.plot(x, g[MEASURED], "o-", label="measured (steady)" if steady else "measured")
            ax.plot(x, g[PREDICTED], "s--", label="predicted")
            ax.set_xticks(list(x))
            best_m = g.loc[g[MEASURED].idxmax(), "threshold"]
            best_p = g.loc[g[PREDICTED].idxmax(), "threshold"]
            ax.set_title(f"N={int(n)}: best B measured {best_m}, predicted {best_p}", fontsize=9)
            ax.set_xlabel("large-model threshold B")
            ax.set_ylabel("throughput (tok/s)")
            ax.legend(fontsize=8)
    table.to_csv(out / "threshold_validation.csv", index=False)
    return [out / "threshold_validation.csv", *_save(fig, out, "threshold_validation")]


def concurrency_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Throughput vs concurrency N per series, and each request's own speed relative to the smallest N."""
    runs = has(select(df, "concurrency_sweep"), THROUGHPUT, "concurrency", "system").copy()
    if runs.empty:
        return []
    runs["series"] = runs.apply(series_label, axis=1)
    runs = runs[runs.groupby("series")["concurrency"].transform("nunique") >= 2]
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


def load_plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """Open-loop load curves: mean / p99 latency and achieved throughput against the offered request rate
    (arrival=poisson), one line per series; load.csv also holds the mean TTFT."""
    runs = has(select(df, "rate_sweep"), "request_rate", "mean_latency_s", THROUGHPUT, "system").copy()
    if runs.empty:
        return []
    runs["series"] = runs.apply(series_label, axis=1)
    runs = runs[runs.groupby("series")["request_rate"].transform("nunique") >= 2]
    if runs.empty:
        return []
    columns = [c for c in (THROUGHPUT, "mean_latency_s", "p99_latency_s", "mean_ttft_s") if c in runs]
    table = runs.groupby(["series", "request_rate"], as_index=False)[columns].mean()
    table = table.sort_values(["series", "request_rate"])
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        palette = dict(zip(table["series"].unique(), sns.color_palette("tab10"), strict=False))
        for name, g in table.groupby("series"):
            axes[0].plot(g["request_rate"], g["mean_latency_s"], "o-", color=palette[name], label=f"{name} mean")
            if "p99_latency_s" in g:
                axes[0].plot(g["request_rate"], g["p99_latency_s"], "s--", color=palette[name], label=f"{name} p99")
            axes[1].plot(g["request_rate"], g[THROUGHPUT], "o-", color=palette[name], label=name)
        axes[0].set_ylabel("request latency (s)")
        axes[1].set_ylabel("throughput (tok/s)")
        for ax in axes:
            ax.set_xlabel("offered load (requests/s, Poisson)")
            ax.legend(fontsize=8)
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
                style = "s--" if row["routing"] == "query" else "o-"
                ax.plot(
                    pts["share"], pts["accuracy"], style, label=f"{row['method']} (APGR {row['APGR']:.2f})"
                )
            ax.set_xlim(-0.02, 1.02)
            ax.set_xlabel("strong-model share (tokens)")
            ax.set_ylabel("accuracy")
            ax.set_title(f"{workload}, {models}", fontsize=9)
            ax.legend(fontsize=8)
    return _save(fig, out, "query_level")
