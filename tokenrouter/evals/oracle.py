"""RouteLLM's "optimal" query router, from the single models' per-problem correctness: it sends to the strong
model exactly the problems the weak model gets wrong and the strong one right, so at strong share s its
accuracy is weak + min(s, gain) (gain: the share of such problems). Drawn beside the measured query-level
curves, it shows how far a real query router is from the best any query-level router could do on these models.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tokenrouter.evals.store import load_requests


def _correct(run_dir: str, seed: object) -> pd.Series | None:
    """Per problem (seed, workload index) of one run: graded correct or not; None when it was not graded."""
    rows = load_requests(run_dir)
    if "correct" not in rows or rows["correct"].isna().any():
        return None
    return rows.set_index(rows["index"].map(lambda index: (seed, index)))["correct"].astype(bool)


def oracle_curve(single: pd.DataFrame) -> list[tuple[float, float]] | None:
    """(strong share, accuracy) corners of the optimal query router over the problems both single models ran
    (`single`: the `system=single` runs of one workload and model set, all repeats); None without both or
    without their requests.jsonl."""
    weak_runs = single[single["large_token_share"] == 0.0]
    strong_runs = single[single["large_token_share"] == 1.0]
    if weak_runs.empty or strong_runs.empty or "run_dir" not in single:
        return None
    if not all((Path(d) / "requests.jsonl").is_file() for d in single["run_dir"]):
        return None  # a runs table without its run dirs (e.g. a copied runs.csv)
    weak = [_correct(r.run_dir, r.seed) for r in weak_runs.itertuples()]
    strong = [_correct(r.run_dir, r.seed) for r in strong_runs.itertuples()]
    if any(c is None for c in [*weak, *strong]):
        return None
    both = pd.concat({"weak": pd.concat(weak), "strong": pd.concat(strong)}, axis=1, join="inner")
    if both.empty:
        return None
    base, gain = float(both["weak"].mean()), float((~both["weak"] & both["strong"]).mean())
    return [(0.0, base), (gain, base + gain), (1.0, base + gain)]
