"""Which runs a report may average, pair or join with a line: those whose resolved configurations agree on
everything that can change what a run measures. Reports pick runs by what they are (system, algorithm,
workload: the runs table's columns), never by the experiment name they were launched under, so a new
algorithm's sweep, a rerun with one value changed, or two studies reported together are each placed by their
own config: a key whose value differs between runs of one group becomes a grouping key and a column or legend
entry of its own, and runs with no counterpart are left out with the reason (`tokenrouter.evals.left_out`). A key a system
never reads (`tokenrouter.evals.systems.UNREAD_KEYS`: lock-step has no delayed batching) does not set its runs apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import product

import pandas as pd

from tokenrouter.evals.left_out import leave_out
from tokenrouter.evals.run_record import NOT_IDENTITY
from tokenrouter.evals.systems import reads

CONFIG = "cfg."
# Config keys that never change what a run measures: the repeat (a report averages over seeds), labels, how a
# run is resumed, traced or scored for a sweeper, the HTTP front end (`serve` only), the demo command's own
# settings, and how long to wait for a start-up or a request (a run that times out fails; it is not slower).
IGNORED = {*NOT_IDENTITY, "seed", "experiment", "experiment_name", "ablation_variant", "runtime.trace",
           "runtime.trace_max_batches", "runtime.trace_file"}
IGNORED_PREFIXES = ("server.", "demo.", "hydra.", "point.")  # point: threshold_validation's sweep helper, only
# interpolated into `concurrency` and `runtime.thresholds` (which are compared)
IGNORED_SUFFIXES = ("timeout_s",)
# The order in which differing keys are named (the knobs users sweep first); other keys come last, so they are
# named only when they tell runs apart that the named keys do not.
ORDER = ("workload.", "algorithm.", "system.", "concurrency", "arrival", "request_rate", "runtime.", "models.")
MISSING = "--"  # how a key a run does not have is shown


def key_name(column: str) -> str:
    """`cfg.algorithm.threshold` -> `algorithm.threshold`."""
    return column.removeprefix(CONFIG)


def config_keys(runs: pd.DataFrame, *, without: Sequence[str] = ()) -> list[str]:
    """The config columns that can change what these runs measure, in ORDER; `without`: names or prefixes
    (e.g. "system.") a report compares along rather than within."""
    def measured(column: str) -> bool:
        key = key_name(column)
        return (column.startswith(CONFIG) and key not in IGNORED and not key.startswith(IGNORED_PREFIXES)
                and not key.endswith(IGNORED_SUFFIXES)
                and not any(key == w or (w.endswith(".") and key.startswith(w)) for w in without))

    def rank(column: str) -> tuple[int, str]:
        key = key_name(column)
        return next((i for i, p in enumerate(ORDER) if key == p or key.startswith(p)), len(ORDER)), key

    return sorted((c for c in runs.columns if measured(c)), key=rank)


def distinguishing(runs: pd.DataFrame, by: Sequence[str], keys: Iterable[str]) -> list[str]:
    """The keys, taken in order, that tell apart runs sharing the `by` values (a missing value counts as a
    value): grouped by `by` plus these, a group's runs agree on every key. A key that only follows one already
    named (e.g. `point.b1` beside `runtime.thresholds`) is not named."""
    labels, named = list(by), []
    for key in keys:
        if key in labels or key not in runs:
            continue
        values = runs[key].astype("string").fillna(MISSING)
        varies = (values.groupby([runs[c].astype("string").fillna(MISSING) for c in labels]).nunique().max()
                  if labels else values.nunique()) > 1
        if varies:
            labels.append(key)
            named.append(key)
    return named


def setting_ids(runs: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """One text id per run of its values at `keys`: equal ids, equal configuration there."""
    if not keys or runs.empty:
        return pd.Series("", index=runs.index, dtype="string")
    return runs[list(keys)].astype("string").fillna(MISSING).agg("\x1f".join, axis=1)


def place(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """`runs` (index reset) with a `_setting` column: `setting_ids` over `keys`. A run of a system that does not
    read some of the keys (tokenrouter.evals.systems.UNREAD_KEYS) belongs to every setting of the runs that read them which
    agrees with it on the keys it reads: one copy per such setting, holding that setting's values at the keys
    it does not read (so one lock-step run is the counterpart of TokenRouter's runs at each max_wait_ms). Such a
    run with no matching setting keeps its own values."""
    runs = runs.reset_index(drop=True)
    systems = runs["system"] if "system" in runs else pd.Series(None, index=runs.index, dtype=object)
    unread = unread_keys(runs, keys)
    partial = systems.map(lambda s: bool(unread.get(s)))
    full = runs[~partial]
    placed = [full.assign(_setting=setting_ids(full, keys))]
    settings = placed[0].drop_duplicates(subset="_setting")
    for system, skip in unread.items():
        mine = runs[partial & (systems == system)]
        if mine.empty:
            continue
        read = [k for k in keys if k not in skip]
        own = setting_ids(mine, read)
        candidates = settings[[*skip, "_setting"]].assign(_read=setting_ids(settings, read).to_numpy())
        matched = mine.drop(columns=skip).assign(_read=own.to_numpy()).merge(candidates, on="_read")
        alone = mine[~own.isin(set(candidates["_read"]))]
        placed += [matched.drop(columns="_read")[[*mine.columns, "_setting"]], alone.assign(_setting=setting_ids(alone, keys))]
    return pd.concat(placed, ignore_index=True)


def unread_keys(runs: pd.DataFrame, keys: Sequence[str]) -> dict[str, list[str]]:
    """Per system among `runs`, which of `keys` it never reads (tokenrouter.evals.systems.UNREAD_KEYS)."""
    systems = runs["system"].dropna().unique() if "system" in runs else ()
    return {s: [k for k in keys if not reads(s, key_name(k))] for s in systems}


def without_unread(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """`runs` with each run's value blanked at the keys its system does not read (a lock-step series is not
    split by runtime.max_wait_ms)."""
    runs = runs.copy()
    for system, skip in unread_keys(runs, keys).items():
        if skip:
            runs[skip] = runs[skip].astype(object)
            runs.loc[runs["system"] == system, skip] = None
    return runs


def describe(row: pd.Series, keys: Iterable[str]) -> str:
    """`workload.name=amc23, algorithm.threshold=0.3`: a run's values at `keys`."""
    return ", ".join(f"{key_name(k)}={value(row.get(k))}" for k in keys)


def value(v: object) -> object:
    """A config value as a table shows it (a key a run does not have: MISSING)."""
    return MISSING if v is None or v is pd.NA or (isinstance(v, float) and pd.isna(v)) else v


def split_series(runs: pd.DataFrame, series: pd.Series, by: Sequence[str] = (), *, along: Sequence[str] = (),
                 keys: Sequence[str] | None = None) -> pd.Series:
    """Legend names that never join runs of different configurations into one line: `series`, plus
    " · key=value" for the config keys (other than the `along` axis; all of `keys` when given) in which runs
    sharing `by` and a name differ, each series naming only the keys that set it apart from the others of
    its name (e.g. "tokenrouter (r2r) · workload.name=amc23")."""
    keys = config_keys(runs, without=along) if keys is None else keys
    frame = without_unread(runs, keys).assign(_series=series)
    named = distinguishing(frame, ["_series", *by], keys)
    if not named:
        return series
    ids = pd.concat([frame["_series"].astype("string"), frame[named].astype("string").fillna(MISSING)], axis=1)
    combos = ids.drop_duplicates()
    labels: dict[tuple[str, ...], str] = {}
    for _, combo in combos.iterrows():
        rest = combos[(combos["_series"] == combo["_series"]) & ~(combos[named] == combo[named]).all(axis=1)]
        parts = []
        for key in named:
            if rest.empty:
                break
            if (rest[key] != combo[key]).any():
                parts.append(f" · {key_name(key)}={combo[key]}")
                rest = rest[rest[key] == combo[key]]
        labels[tuple(combo)] = str(combo["_series"]) + "".join(parts)
    return pd.Series([labels[tuple(row)] for row in ids.itertuples(index=False)], index=runs.index)


def closed_loop(runs: pd.DataFrame, report: str) -> pd.DataFrame:
    """The closed-loop runs (N clients, each sending its next request when the last finished): an open-loop
    run's throughput follows the rate it was offered, so it is compared in the load report only (said)."""
    arrival = runs.get("cfg.arrival", pd.Series("closed_loop", index=runs.index)).astype("string")
    open_loop = arrival == "poisson"
    leave_out(report, runs[open_loop.fillna(False)], "open loop (arrival=poisson): its throughput follows the "
              "offered rate (see the load report)")
    return runs[~open_loop.fillna(False)]


def sort_rows(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """`table` sorted by `columns`: numerically where a column holds only numbers, else as text."""
    def key(column: pd.Series) -> pd.Series:
        numbers = pd.to_numeric(column, errors="coerce")
        return numbers if numbers.notna().sum() == column.notna().sum() else column.astype(str)

    return table.sort_values(list(columns), key=key).reset_index(drop=True)


@dataclass
class Comparison:
    """Runs of a subject system and its rivals on one configuration (the systems' own `system.*` keys aside)."""

    setting: pd.Series  # the config values the runs share (config_keys without system.*)
    groups: dict[str, pd.DataFrame]  # system -> its runs on this setting (repeats: seeds)
    variants: dict[str, str]  # system -> its `system.*` values that set it apart, "" when it has one variant


def compare_systems(runs: pd.DataFrame, subject: str, rivals: Sequence[str], report: str) -> list[Comparison]:
    """Every configuration on which `subject` and at least one of `rivals` ran, with their runs; the runs of
    either side with no counterpart of the same configuration are left out, naming the keys in which they
    differ from the nearest configuration the other side ran."""
    systems = (subject, *rivals)
    runs = runs[runs["system"].isin(systems)]
    if runs.empty:  # e.g. single-model runs only: nothing to compare
        return []
    keys = config_keys(runs, without=("system.",))
    runs = place(runs, keys)
    ids = runs["_setting"]
    present = {s: set(ids[runs["system"] == s]) for s in systems}
    rival_ids = set().union(*(present[r] for r in rivals))
    paired = present[subject] & rival_ids
    sides = [(subject, rival_ids, "/".join(rivals)), *((r, present[subject], subject) for r in rivals)]
    for side, others, label in sides:
        alone = runs[(runs["system"] == side) & ~ids.isin(paired)]
        if not alone.empty:
            nearest = differing(runs, ids, alone, others, keys)
            why = f"no {label} run of the same configuration"
            leave_out(report, alone, f"{side}: {why}" + (f" (nearest differs in {nearest})" if nearest else ""))
    comparisons = []
    for setting in sorted(paired):
        in_setting = runs[ids == setting]
        groups_per_system = {}
        for system in systems:
            mine = in_setting[in_setting["system"] == system]
            if mine.empty:
                continue
            own = distinguishing(mine, [], [c for c in config_keys(mine) if key_name(c).startswith("system.")])
            variants = ({describe(g.iloc[0], own): g for _, g in mine.groupby(setting_ids(mine, own))}
                        if own else {"": mine})
            groups_per_system[system] = variants
        for choice in product(*(list(v.items()) for v in groups_per_system.values())):
            chosen = dict(zip(groups_per_system, choice, strict=True))
            comparisons.append(Comparison(setting=in_setting.iloc[0][keys],  # a placed copy holds its setting's values
                                          groups={s: g for s, (_, g) in chosen.items()},
                                          variants={s: v for s, (v, _) in chosen.items()}))
    return comparisons


def differing(runs: pd.DataFrame, ids: pd.Series, alone: pd.DataFrame, others: set[str], keys: Sequence[str]) -> str:
    """The keys in which the `alone` runs' configurations (the first 20) differ from the nearest of `others`."""
    if not others:
        return ""
    reference = {i: runs.loc[ids == i].iloc[0] for i in others}
    names: set[str] = set()
    for _, run in alone.drop_duplicates(subset=[k for k in keys if k in alone]).head(20).iterrows():
        diffs = [[k for k in keys if str(value(run.get(k))) != str(value(ref.get(k)))
                  and reads(run.get("system"), key_name(k)) and reads(ref.get("system"), key_name(k))]
                 for ref in reference.values()]
        names.update(key_name(k) for k in min(diffs, key=len))
    return ", ".join(sorted(names))
