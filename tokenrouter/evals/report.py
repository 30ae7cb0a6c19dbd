"""Reports from a table of runs (`tokenrouter.evals.store.load_results`): Table 3, the Pareto plot, threshold validation,
the ablation table, the concurrency plot and query-level routing metrics.

Each report is written only when the runs hold what it needs (e.g. Table 3 needs TokenRouter and an R2R
baseline on the same model pair), so one command over any set of run dirs does the right thing. When runs
carry an `experiment` name (set by the conf/experiment configs), a report uses the runs of its own experiment
if there are any, else the untagged runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from tokenrouter.baselines.routellm_metrics import apgr, cpt
from tokenrouter.evals import paper
from tokenrouter.evals.comparable import (
    Comparison,
    closed_loop,
    compare_systems,
    config_keys,
    distinguishing,
    key_name,
    place,
    sort_rows,
    value,
)
from tokenrouter.evals.left_out import LeftOut, collecting, leave_out
from tokenrouter.evals.left_out import table as left_out_table
from tokenrouter.evals.machine import contended, note
from tokenrouter.evals.oracle import oracle_curve
from tokenrouter.evals.runs_table import PREDICTED, STEADY, THROUGHPUT, has, pair_label, series_label
from tokenrouter.evals.tables import write_table

ORACLE = "optimal query router (oracle)"
BASELINES = {"lockstep": "R2R lockstep", "official_r2r": "R2R official"}


def write_reports(df: pd.DataFrame, out: Path) -> list[Path]:
    """Every report the runs support, under `out`; returns the files written (runs.csv always)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "runs.csv"]
    df.to_csv(written[0], index=False)
    from tokenrouter.evals import breakdown, plots  # matplotlib only when there is something to draw

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
    with collecting() as notes:
        for report in reports:
            written += report(df, out)
    written += write_left_out(notes, out)
    from tokenrouter.evals.html_report import write_html_report

    written.append(write_html_report(df, out))
    return written


def write_left_out(notes: list[LeftOut], out: Path) -> list[Path]:
    """left_out.md / .csv / .tex: the runs each report left out and why (none: an earlier report's removed)."""
    for stale in ("left_out.md", "left_out.csv", "left_out.tex"):
        (out / stale).unlink(missing_ok=True)
    if not notes:
        return []
    return write_table(left_out_table(notes), out, "left_out", "Runs each report left out, and why.")


def table3(df: pd.DataFrame, out: Path) -> list[Path]:
    """R2R (lockstep / official) vs TokenRouter throughput per configuration both ran (model pair, N, and every
    other config key in which the compared configurations differ, as columns), the paper's Table 3 beside its
    N=4 rows; each system's output length and large-model share alongside (see OUTPUTS)."""
    runs = closed_loop(has(df, "system", "models", THROUGHPUT), "table3")
    comparisons = compare_systems(runs, "tokenrouter", tuple(BASELINES), "table3")
    if not comparisons:
        return []
    shown, variants = columns_of(comparisons)
    rows = []
    for c in comparisons:
        got = {s: c.groups[s][[THROUGHPUT, *outputs(c.groups[s])]].mean() if s in c.groups else None
               for s in ("tokenrouter", *BASELINES)}
        speed = {s: None if r is None else r[THROUGHPUT] for s, r in got.items()}
        first = c.groups["tokenrouter"].iloc[0]
        label, n = pair_label(first["models"]), first["concurrency"]
        # the paper's figures beside its own setting only: N=4, the full runtime (delayed batching on)
        delayed = c.setting.get("cfg.runtime.delayed_batching")
        as_paper = n == paper.TABLE3_N and (delayed is None or pd.isna(delayed) or bool(delayed))
        ref = paper.TABLE3.get(label, (None, None, None)) if as_paper else (None, None, None)
        row = {"pair": label, "N": n, **{key_name(k): value(c.setting[k]) for k in shown}}
        row.update({f"{SYSTEM_NAMES[s]} variant": c.variants.get(s) for s in variants})
        for system, baseline in BASELINES.items():
            row[f"{baseline} tok/s"] = speed[system]
        row["TokenRouter tok/s"] = speed["tokenrouter"]
        for system, baseline in BASELINES.items():
            row[f"gain vs {baseline.split()[1]}"] = speed["tokenrouter"] / speed[system] if speed[system] else None
        row.update({"paper R2R tok/s": ref[0], "paper TokenRouter tok/s": ref[1], "paper gain": ref[2]})
        for system, system_name in SYSTEM_NAMES.items():
            row.update(output_cells(got[system], system_name))
        row[MACHINE] = machine_cell(c.groups.values())
        rows.append(row)
    table = without_quiet_machines(sort_rows(pd.DataFrame(rows), ["pair", "N", *map(key_name, shown)]))
    caption = ("Table 3: R2R vs TokenRouter decoding throughput (tok/s), one row per configuration both ran "
               "(config keys in which rows differ are columns); paper figures at N=4 with delayed batching, on GPUs. Output tokens and "
               "large-model shares per system: greedy outputs may differ between systems on GPU.")
    return write_table(table, out, "table3", caption)


SYSTEM_NAMES = {**BASELINES, "tokenrouter": "TokenRouter"}
MACHINE = "timings"  # a comparison's column saying why its runs' timings are not comparable (tokenrouter.evals.machine)


def machine_cell(groups: Iterable[pd.DataFrame]) -> str | None:
    """`contended: ...` when the machine made these runs' timings incomparable, else None."""
    return note(contended(pd.concat(list(groups)))) or None


def without_quiet_machines(table: pd.DataFrame) -> pd.DataFrame:
    """The table without its MACHINE column when no row was contended."""
    return table.drop(columns=MACHINE) if MACHINE in table and table[MACHINE].isna().all() else table


def columns_of(comparisons: list[Comparison]) -> tuple[list[str], list[str]]:
    """The config keys in which the compared configurations differ, beyond the model pair and N (the row
    label), and the systems that ran in several variants (their `system.*` values) on some configuration."""
    settings = pd.DataFrame([c.setting for c in comparisons]).reset_index(drop=True)
    label = [k for k in ("cfg.models.name", "cfg.concurrency") if k in settings]
    shown = distinguishing(settings, label, [k for k in settings.columns if k not in label])
    variants = sorted({s for c in comparisons for s, v in c.variants.items() if v})
    return shown, variants


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
    """Throughput per variant (rows) and N (columns, as the paper: largest N first), paper figures alongside;
    one block of rows per configuration on which several variants ran (config keys in which blocks differ
    are columns)."""
    runs = has(df, "system", "concurrency", THROUGHPUT)
    runs = closed_loop(runs[runs["system"].isin(SYSTEM_NAMES)], "ablation").copy()
    if runs.empty:
        return []
    runs["variant"] = runs.apply(ablation_variant, axis=1)
    keys = config_keys(runs, without=("system.", "runtime.delayed_batching", "concurrency"))
    runs = place(runs, keys)  # a lock-step run joins each block whose keys it reads agree with it
    own = distinguishing(runs, ["_setting", "variant"], [k for k in config_keys(runs) if key_name(k).startswith("system.")])
    if own:  # a system run in several variants of its own (e.g. official R2R at two `system.threshold`s)
        runs["variant"] += runs.apply(lambda r: "".join(f" ({key_name(k)}={r[k]})" for k in own if pd.notna(r.get(k))),
                                      axis=1)
    several = runs.groupby(["_setting", "concurrency"])["variant"].transform("nunique") > 1
    unused = runs[~runs["run_dir"].isin(set(runs.loc[several, "run_dir"]))].drop_duplicates(subset="run_dir")
    leave_out("ablation", unused, "no other variant (full, w/o delayed batching, lock-step, official R2R) ran the "
              "same configuration at its N")
    runs = runs[several]
    if runs.empty:
        return []
    shown = distinguishing(runs, [], keys)
    for key in shown:
        runs[key_name(key)] = runs[key].map(value).astype(str)
    index = [*map(key_name, shown), "variant"]
    table = runs.pivot_table(index=index, columns="concurrency", values=THROUGHPUT, aggfunc="mean")
    table = table[sorted(table.columns, reverse=True)]
    table.columns = [f"N={int(n)} tok/s" for n in table.columns]
    order = [*paper.ABLATION]  # the paper's row order, other variants after
    table = table.reset_index()
    table["_order"] = table["variant"].map(lambda v: order.index(v) if v in order else len(order))
    table = table.sort_values([*map(key_name, shown), "_order", "variant"]).drop(columns="_order")
    # the paper's figures only beside runs on its pair: another pair's (e.g. the sim pair on CPU) are not comparable
    pairs = (table["models.name"].map(pair_label) if "models.name" in table
             else pd.Series(pair_label(runs["models"].iloc[0]), index=table.index))
    on_paper_pair = pairs == paper.ABLATION_PAIR
    if on_paper_pair.any():
        for n in sorted({int(c.split("=")[1].split()[0]) for c in table.columns if c.startswith("N=")}, reverse=True):
            table[f"paper N={n} (GPU)"] = [paper.ABLATION.get(v, {}).get(n) if ok else None
                                           for v, ok in zip(table["variant"], on_paper_pair, strict=True)]
        caption = (f"Ablation: decoding throughput (tok/s) per variant and concurrency N; the paper's figures (on "
                   f"GPUs) beside the rows on its pair ({paper.ABLATION_PAIR}) only.")
    else:
        shown_pairs = ", ".join(sorted(set(pairs)))
        caption = (f"Ablation: decoding throughput (tok/s) per variant and concurrency N, pair {shown_pairs}. The "
                   f"paper's figures are of another pair ({paper.ABLATION_PAIR}) on GPUs and are not set beside "
                   "these; compare the variants' order and ratios, not their tok/s.")
    return write_table(table, out, "ablation", caption)


def systems_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """TokenRouter / lock-step per configuration both ran (N, and the config keys in which configurations
    differ), measured (total / elapsed and steady) and predicted (the throughput model's chain over
    lock-step's closed form), from runs that carry predictions (sim engines)."""
    runs = closed_loop(has(df, "system", "concurrency", THROUGHPUT, PREDICTED), "systems").copy()
    if runs.empty:
        return pd.DataFrame()
    if STEADY not in runs:
        runs[STEADY] = float("nan")
    comparisons = compare_systems(runs, "tokenrouter", ("lockstep",), "systems")
    if not comparisons:
        return pd.DataFrame()
    shown, _ = columns_of(comparisons)
    shown = [k for k in shown if k != "cfg.models.name"] if runs["models"].nunique() == 1 else shown
    rows = []
    for c in comparisons:
        tr, ls = (c.groups[s][[THROUGHPUT, STEADY, PREDICTED, *outputs(runs)]].mean() for s in ("tokenrouter", "lockstep"))
        predicted = tr[PREDICTED] / ls[PREDICTED]
        measured, steady = tr[THROUGHPUT] / ls[THROUGHPUT], tr[STEADY] / ls[STEADY]
        rows.append({"N": int(c.groups["tokenrouter"]["concurrency"].iloc[0]),
                     **{key_name(k): value(c.setting[k]) for k in shown},
                     "tokenrouter tok/s": tr[THROUGHPUT], "lockstep tok/s": ls[THROUGHPUT],
                     "ratio": measured, "ratio (steady)": steady, "predicted ratio": predicted,
                     "difference %": 100 * (measured / predicted - 1),
                     "difference % (steady)": 100 * (steady / predicted - 1),
                     **output_cells(tr, "tokenrouter"), **output_cells(ls, "lockstep"),
                     MACHINE: machine_cell(c.groups.values())})
    return without_quiet_machines(sort_rows(pd.DataFrame(rows), ["N", *map(key_name, shown)]))


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
    from tokenrouter.evals.plots import query_level_plot

    caption = ("Query-level metrics: APGR and CPT(20/50/80%) (strong-model share needed for that fraction of the "
               "quality gap); the oracle is RouteLLM's optimal query router from the single models' per-problem "
               "correctness.")
    return write_table(pd.DataFrame(rows), out, "query_level", caption) + query_level_plot(
        pd.DataFrame(rows), pd.DataFrame(curves), out
    )
