"""The answer a study gives, one line per comparison: TokenRouter's throughput over an R2R baseline's (lock-step or
the official code) on the same configuration, the ratio's 95% interval over repeats, the accuracy difference, the
paper's figure where the paper has one for that setting, and whether the machine was contended while the runs
were measured (`tokenrouter.evals.machine`). report.html opens with these as cards; the demo prints the same judgement.

Why one module: a bare ratio from a busy machine reads as a result; every place that prints a ratio prints it
with its interval and its machine's state, from the same code.
"""

from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass, field

import pandas as pd

from tokenrouter.evals import machine, paper
from tokenrouter.evals.comparable import (
    MISSING,
    closed_loop,
    compare_systems,
    config_keys,
    distinguishing,
    key_name,
    value,
)
from tokenrouter.evals.left_out import collecting
from tokenrouter.evals.runs_table import THROUGHPUT, has, pair_label

SUBJECT = "tokenrouter"
RIVALS = {"lockstep": "lock-step R2R", "official_r2r": "official R2R"}
# two-sided 95% quantiles of Student's t by degrees of freedom (larger: the normal's 1.96)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (from T95, rounded down)."""
    known = [k for k in T95 if k <= df]
    return T95[max(known)] if df <= 30 and known else 1.96


def ratio_interval(ratios: list[float]) -> tuple[float, float] | None:
    """The 95% interval of a ratio from its per-repeat values (a t interval on their logarithms, so 2x and 0.5x
    are symmetric); None for fewer than two repeats."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 2:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = t95(len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean + half)


def interval_text(ratios: list[float]) -> str:
    """`95% interval 1.13-1.43x over 3 repeats`, or empty for one repeat."""
    interval = ratio_interval(ratios)
    if interval is None:
        return ""
    return f"95% interval {interval[0]:.2f}-{interval[1]:.2f}x over {len(ratios)} repeats"


@dataclass
class Headline:
    """TokenRouter against one baseline on one configuration."""

    title: str  # what the configuration is: pair, workload, algorithm and the keys that set it apart, N
    rival: str  # the baseline, in words
    subject_tok_s: float
    rival_tok_s: float
    ratio: float  # of the means over repeats
    per_repeat: list[float] = field(default_factory=list)  # the ratio within each seed both systems ran
    accuracy: tuple[float, float] | None = None  # (TokenRouter, baseline) mean accuracy, where graded
    paper: float | None = None  # the paper's gain at this setting (Table 3: its pair, N=4, GPUs)
    contended: list[str] = field(default_factory=list)  # why the timings are not comparable (tokenrouter.evals.machine)

    @property
    def interval(self) -> tuple[float, float] | None:
        return ratio_interval(self.per_repeat)

    def sentence(self) -> str:
        """The headline in one line of text (demo output, markdown)."""
        text = (f"{self.title}: TokenRouter / {self.rival} = {self.ratio:.2f}x "
                f"({self.subject_tok_s:.1f} vs {self.rival_tok_s:.1f} tok/s")
        spread = interval_text(self.per_repeat)
        text += f"; {spread})" if spread else ")"
        if self.accuracy is not None:
            text += f", accuracy {self.accuracy[0]:.1%} vs {self.accuracy[1]:.1%}"
        if self.paper is not None:
            text += f", paper {self.paper:.2f}x on GPUs"
        if self.contended:
            text += f"; {machine.note(self.contended)}"
        return text


def headlines(df: pd.DataFrame) -> list[Headline]:
    """Every configuration on which TokenRouter and an R2R baseline both ran closed loop (as Table 3 pairs
    them, `tokenrouter.evals.comparable.compare_systems`), one Headline per baseline."""
    runs = has(df, "system", THROUGHPUT)
    if runs.empty or not runs["system"].isin(list(RIVALS)).any() or not (runs["system"] == SUBJECT).any():
        return []
    # the reports that print tables already said which runs they left out: quietly here
    with collecting(), contextlib.redirect_stderr(io.StringIO()):
        comparisons = compare_systems(closed_loop(runs, "headline"), SUBJECT, tuple(RIVALS), "headline")
    if not comparisons:
        return []
    settings = pd.DataFrame([c.setting for c in comparisons]).reset_index(drop=True)
    fixed = [k for k in ("cfg.models.name", "cfg.workload.name", "cfg.algorithm.name", "cfg.concurrency")
             if k in settings]
    shown = distinguishing(settings, fixed, [k for k in config_keys(settings) if k not in fixed])
    out = []
    for c in comparisons:
        mine = c.groups[SUBJECT]
        first = mine.iloc[0]
        n = first.get("concurrency")
        parts = [f"pair {pair_label(first.get('models'))}", str(first.get("workload")), str(first.get("algorithm"))]
        # the algorithm's own knobs always (threshold=0.5), then the other keys in which comparisons differ
        knobs = [k for k in c.setting.index if key_name(k).startswith("algorithm.")
                 and key_name(k) not in ("algorithm.name", "algorithm.router")]
        parts += [f"{key_name(k).removeprefix('algorithm.')}={value(c.setting[k])}"
                  for k in knobs if value(c.setting[k]) != MISSING]
        parts += [f"{key_name(k)}={value(c.setting[k])}" for k in shown
                  if k not in knobs and value(c.setting[k]) != MISSING]
        parts.append(f"N={n}")
        title = " · ".join(parts)
        for rival, rival_name in RIVALS.items():
            if rival not in c.groups:
                continue
            theirs = c.groups[rival]
            a, b = float(mine[THROUGHPUT].mean()), float(theirs[THROUGHPUT].mean())
            out.append(Headline(
                title=title + (f" · {c.variants[rival]}" if c.variants.get(rival) else ""),
                rival=rival_name, subject_tok_s=a, rival_tok_s=b, ratio=a / b if b else math.nan,
                per_repeat=per_seed_ratios(mine, theirs), accuracy=accuracies(mine, theirs),
                paper=paper_gain(first, rival, c.setting),
                contended=machine.contended(pd.concat([mine, theirs]))))
    return out


def per_seed_ratios(mine: pd.DataFrame, theirs: pd.DataFrame) -> list[float]:
    """The throughput ratio within each seed both sides ran (their runs' means per seed)."""
    def by_seed(runs: pd.DataFrame) -> pd.Series:
        seeds = runs["seed"].astype("Float64").fillna(0) if "seed" in runs else pd.Series(0, index=runs.index)
        return runs[THROUGHPUT].groupby(seeds.to_numpy()).mean()

    a, b = by_seed(mine), by_seed(theirs)
    return [float(a[s] / b[s]) for s in sorted(set(a.index) & set(b.index)) if b[s]]


def accuracies(mine: pd.DataFrame, theirs: pd.DataFrame) -> tuple[float, float] | None:
    if "accuracy" not in mine or "accuracy" not in theirs:
        return None
    a, b = mine["accuracy"].mean(), theirs["accuracy"].mean()
    return None if pd.isna(a) or pd.isna(b) else (float(a), float(b))


def paper_gain(row: pd.Series, rival: str, setting: pd.Series) -> float | None:
    """The paper's Table 3 gain for this pair, against R2R, at its N with the full runtime (delayed batching
    on); None elsewhere (the paper's figures are of GPUs and those settings only)."""
    delayed = setting.get("cfg.runtime.delayed_batching")
    full = delayed is None or pd.isna(delayed) or bool(delayed)
    if rival not in RIVALS or row.get("concurrency") != paper.TABLE3_N or not full:
        return None
    figures = paper.TABLE3.get(pair_label(row.get("models")))
    return figures[2] if figures else None
