"""Reports from a table of runs (`evals.store.load_results`): Table 3, the Pareto plot, threshold validation,
the ablation table, the concurrency plot and query-level routing metrics.

Each report is written only when the runs hold what it needs (e.g. Table 3 needs TokenRouter and an R2R
baseline on the same model pair), so one command over any set of run dirs does the right thing. When runs
carry an `experiment` name (set by the conf/experiment configs), a report uses the runs of its own experiment
if there are any, else the untagged runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from baselines.routellm_metrics import apgr, cpt
from evals import paper
from evals.oracle import oracle_curve
from evals.runs_table import PREDICTED, STEADY, THROUGHPUT, has, pair_label, select, series_label
from evals.tables import write_table

ORACLE = "optimal query router (oracle)"
BASELINES = {"lockstep": "R2R lockstep", "official_r2r": "R2R official"}


def write_reports(df: pd.DataFrame, out: Path) -> list[Path]:
    """Every report the runs support, under `out`; returns the files written (runs.csv always)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "runs.csv"]
    df.to_csv(written[0], index=False)
    from evals import breakdown, plots  # matplotlib only when there is something to draw

    reports: list[Callable[[pd.DataFrame, Path], list[Path]]] = [
        table3,
        plots.pareto_plot,
        plots.threshold_validation_plot,
        ablation,
        plots.concurrency_plot,
        plots.load_plot,
        systems,
        query_level,
        breakdown.serving_breakdown,
        breakdown.systems_side_by_side,
    ]
    for report in reports:
        written += report(df, out)
    from evals.html_report import write_html_report

    written.append(write_html_report(df, out))
    return written


def table3(df: pd.DataFrame, out: Path) -> list[Path]:
    """R2R (lockstep / official) vs TokenRouter throughput per model pair and N, next to the paper's Table 3;
    each system's output length and large-model share alongside (see OUTPUTS)."""
    runs = has(select(df, "table3"), "system", "models", THROUGHPUT)
    # one row per router threshold: runs at different thresholds route different tokens, so never averaged
    threshold = runs.get("cfg.algorithm.threshold", pd.Series(None, index=runs.index, dtype=object))
    runs = runs.assign(threshold=threshold.astype(object).where(threshold.notna(), "--"))
    keys = ["models", "concurrency", "threshold"]
    means = runs.groupby([*keys, "system"], dropna=False)[[THROUGHPUT, *outputs(runs)]].mean()
    several = runs["threshold"].nunique() > 1
    rows = []
    for models, n, threshold in sorted({k[:3] for k in means.index}, key=str):
        got = {s: means.loc[(models, n, threshold, s)] if (models, n, threshold, s) in means.index else None
               for s in ("tokenrouter", *BASELINES)}
        speed = {s: None if r is None else r[THROUGHPUT] for s, r in got.items()}
        if speed["tokenrouter"] is None or all(speed[s] is None for s in BASELINES):
            continue
        label = pair_label(models)
        ref = paper.TABLE3.get(label, (None, None, None))
        row = {"pair": label, "N": n, **({"threshold": threshold} if several else {})}
        for system, name in BASELINES.items():
            row[f"{name} tok/s"] = speed[system]
        row["TokenRouter tok/s"] = speed["tokenrouter"]
        for system, name in BASELINES.items():
            row[f"gain vs {name.split()[1]}"] = speed["tokenrouter"] / speed[system] if speed[system] else None
        row.update({"paper R2R tok/s": ref[0], "paper TokenRouter tok/s": ref[1], "paper gain": ref[2]})
        for system, name in {**BASELINES, "tokenrouter": "TokenRouter"}.items():
            row.update(output_cells(got[system], name))
        rows.append(row)
    if not rows:
        return []
    caption = ("Table 3: R2R vs TokenRouter decoding throughput (tok/s); paper figures at N=4 on GPUs. Output "
               "tokens and large-model shares per system: greedy outputs may differ between systems on GPU.")
    return write_table(pd.DataFrame(rows), out, "table3", caption)


# Greedy outputs are not token-identical across systems on GPU (batch-dependent bf16 kernels), so tables that
# compare systems on the same prompts show each system's mean output length and large-model token share
# next to its throughput instead of assuming the same outputs.
OUTPUTS = {"mean_output_tokens": "output tokens", "large_token_share": "large share"}


def outputs(runs: pd.DataFrame) -> list[str]:
    """The OUTPUTS columns these runs carry."""
    return [c for c in OUTPUTS if c in runs]


def output_cells(means: pd.Series | None, name: str) -> dict[str, object]:
    """`<name> output tokens` and `<name> large share` from one system's mean row (None where absent)."""
    return {f"{name} {label}": None if means is None or column not in means else means[column]
            for column, label in OUTPUTS.items()}


# conf/ablation/<variant>.yaml names -> the paper's row labels (the lock-step driver is neither asynchronous
# nor delayed-batching)
ABLATION_LABELS = {
    "full": "full",
    "no_delayed_batching": "w/o delayed batching",
    "lockstep": "w/o delayed batching, w/o async",
}


def ablation_variant(row: pd.Series) -> str:
    """A run's ablation row label, matching the paper's rows where it can."""
    if isinstance(row.get("variant"), str):
        return ABLATION_LABELS.get(row["variant"], row["variant"])
    system = row.get("system")
    if system == "official_r2r":
        return "official R2R"
    if system == "lockstep":
        return ABLATION_LABELS["lockstep"]
    if system != "tokenrouter":
        return series_label(row)
    return ABLATION_LABELS["full" if row.get("delayed_batching") is not False else "no_delayed_batching"]


def ablation(df: pd.DataFrame, out: Path) -> list[Path]:
    """Throughput per variant (rows) and N (columns, as the paper: largest N first), paper figures alongside."""
    runs = has(select(df, "ablation"), "system", "concurrency", THROUGHPUT).copy()
    if runs.empty:
        return []
    runs["variant"] = runs.apply(ablation_variant, axis=1)
    if runs["variant"].nunique() < 2:
        return []
    table = runs.pivot_table(index="variant", columns="concurrency", values=THROUGHPUT, aggfunc="mean")
    table = table[sorted(table.columns, reverse=True)]
    table.columns = [f"N={int(n)} tok/s" for n in table.columns]
    order = [*paper.ABLATION]  # the paper's row order, other variants after
    table = table.reset_index().sort_values("variant", key=lambda v: v.map(lambda x: (order + [x]).index(x)))
    for n in sorted({int(c.split("=")[1].split()[0]) for c in table.columns[1:]}, reverse=True):
        table[f"paper N={n}"] = [paper.ABLATION.get(v, {}).get(n) for v in table["variant"]]
    return write_table(
        table, out, "ablation", "Ablation: decoding throughput (tok/s) per variant and concurrency N."
    )


def systems_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """TokenRouter / lock-step per concurrency N, measured (total / elapsed and steady) and predicted (the
    throughput model's chain over lock-step's closed form), from runs that carry predictions (sim engines)."""
    runs = has(select(df, "systems_sim"), "system", "concurrency", THROUGHPUT, PREDICTED).copy()
    if runs.empty:
        return pd.DataFrame()
    if STEADY not in runs:
        runs[STEADY] = float("nan")
    means = runs.groupby(["concurrency", "system"])[[THROUGHPUT, STEADY, PREDICTED, *outputs(runs)]].mean()
    rows = []
    for n in sorted({n for n, _ in means.index}):
        if (n, "tokenrouter") not in means.index or (n, "lockstep") not in means.index:
            continue
        tr, ls = means.loc[(n, "tokenrouter")], means.loc[(n, "lockstep")]
        predicted = tr[PREDICTED] / ls[PREDICTED]
        measured, steady = tr[THROUGHPUT] / ls[THROUGHPUT], tr[STEADY] / ls[STEADY]
        rows.append({"N": int(n), "tokenrouter tok/s": tr[THROUGHPUT], "lockstep tok/s": ls[THROUGHPUT],
                     "ratio": measured, "ratio (steady)": steady, "predicted ratio": predicted,
                     "difference %": 100 * (measured / predicted - 1),
                     "difference % (steady)": 100 * (steady / predicted - 1),
                     **output_cells(tr, "tokenrouter"), **output_cells(ls, "lockstep")})
    return pd.DataFrame(rows)


def systems(df: pd.DataFrame, out: Path) -> list[Path]:
    table = systems_comparison(df)
    if table.empty:
        return []
    return write_table(table, out, "systems", "TokenRouter / lock-step R2R throughput: measured (total / elapsed, "
                       "and steady: without the drain tail) against the throughput model's prediction.")


def query_level(df: pd.DataFrame, out: Path) -> list[Path]:
    """APGR and CPT(50%) per routing method, against the weak-only and strong-only accuracies of the same
    workload and model set (from `system=single` runs). The strong share is the last model's token share."""
    runs = has(df, "system", "accuracy", "large_token_share")
    rows, curves = [], []
    for (workload, models), group in runs.groupby(["workload", "models"], dropna=False):
        single = group[group["system"] == "single"]
        weak = single[single["large_token_share"] == 0.0]["accuracy"].mean()
        strong = single[single["large_token_share"] == 1.0]["accuracy"].mean()
        if pd.isna(weak) or pd.isna(strong):
            continue
        routed = group[group["system"] != "single"].copy()
        routed["series"] = routed.apply(series_label, axis=1)
        methods = [(series, list(zip(points["large_token_share"], points["accuracy"], strict=True)))
                   for series, points in routed.groupby("series")]
        optimal = oracle_curve(single)
        if optimal is not None:
            methods.append((ORACLE, optimal))
        for series, pts in methods:
            level = "query" if series.startswith("query-level routing") else "oracle" if series == ORACLE else "token"
            rows.append(
                {
                    "workload": workload,
                    "models": models,
                    "method": series,
                    "routing": level,
                    "points": len(pts),
                    "weak acc": weak,
                    "strong acc": strong,
                    "APGR": apgr(pts, weak, strong),
                    **{f"CPT({t:.0%})": cpt(pts, weak, strong, t) for t in (0.2, 0.5, 0.8)},
                }
            )
            curves += [
                {"workload": workload, "models": models, "method": series, "share": s, "accuracy": a}
                for s, a in pts
            ]
    if not rows:
        return []
    from evals.plots import query_level_plot

    caption = ("Query-level metrics: APGR and CPT(20/50/80%) (strong-model share needed for that fraction of the "
               "quality gap); the oracle is RouteLLM's optimal query router from the single models' per-problem "
               "correctness.")
    return write_table(pd.DataFrame(rows), out, "query_level", caption) + query_level_plot(
        pd.DataFrame(rows), pd.DataFrame(curves), out
    )
