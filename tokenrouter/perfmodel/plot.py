"""Predicted throughput against the last (largest) model's threshold, one line per N (seaborn)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tokenrouter.errors import UserError
from tokenrouter.perfmodel.chain import throughput
from tokenrouter.perfmodel.spec import SystemSpec


def threshold_sweep(spec: SystemSpec, n: int, others: Sequence[int]) -> list[tuple[int, float]]:
    """(B_last, throughput) for every feasible last threshold, the other models held at `others`."""
    slack = n - 1 - sum(x - 1 for x in others)
    return [(b, throughput(spec, n, [*others, b]).throughput_tok_s) for b in range(1, slack + 2)]


def setting_title(spec: SystemSpec) -> str:
    """The setting a figure is about, for its title: step times at batch 1, the hand-off probabilities, the
    time quantum (`step 6.0 / 27.9 ms, route 0->1 0.35, 1->0 1.00, quantum 0.1 ms`)."""
    steps = " / ".join(f"{p.decode_ms(1):.3g}" for p in spec.latencies)
    routes = ", ".join(f"{i}->{j} {x:.2f}" for i, row in enumerate(spec.route) for j, x in enumerate(row)
                       if i != j and x > 0)
    return f"step {steps} ms, route {routes or 'none'}, quantum {spec.quantum_ms:.3g} ms"


def check_plot_path(path: str | Path) -> Path:
    """Reject a bad figure name before any (possibly long) computation."""
    out = Path(path)
    if out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise UserError(f"--plot: expected a .png, .pdf or .svg file name, got {out.name!r}")
    return out


def plot_sweeps(curves: Mapping[int, list[tuple[int, float]]], path: str | Path, title: str = "") -> Path:
    """Write the figure; `curves` maps N to its sweep. The best point of each line is marked with its
    threshold, and the no-delay point (B = 1) with how far below the best it is: the gain delayed batching
    buys, on an axis from zero so that a few percent looks like a few percent."""
    out = check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns
    from matplotlib.ticker import MaxNLocator

    rows = [{"N": n, "threshold": b, "throughput": t} for n, pts in curves.items() for b, t in pts]
    frame = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    sns.lineplot(data=frame, x="threshold", y="throughput", hue="N", marker="o", palette="viridis", ax=ax)
    best = frame.loc[frame.groupby("N")["throughput"].idxmax()]
    ax.scatter(
        best["threshold"], best["throughput"], s=120, facecolors="none", edgecolors="red", label="best"
    )
    for _, row in best.iterrows():
        ax.annotate(f"B={int(row['threshold'])}", (row["threshold"], row["throughput"]), xytext=(0, 7),
                    textcoords="offset points", ha="center", fontsize=7, color="red")
        one = frame[(frame["N"] == row["N"]) & (frame["threshold"] == 1)]["throughput"]
        if not one.empty and int(row["threshold"]) != 1:
            ax.annotate(f"B=1 {one.iloc[0] / row['throughput'] - 1:+.1%}", (1, one.iloc[0]), xytext=(4, -11),
                        textcoords="offset points", ha="left", fontsize=7)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("threshold of the last (large) model, B_last")
    ax.set_ylabel("predicted throughput (committed tok/s)")
    ax.set_title(title, fontsize=9)
    ax.legend(title="N")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
