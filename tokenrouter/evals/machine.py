"""The machine's state during a run (summary.json `machine`), and whether a comparison made on it can be trusted.

Why: on a shared CPU a throughput ratio between two systems moves with whatever else runs beside them; a demo
that printed TokenRouter at 0.64x of lock-step while its large-model steps took 7x the committed reference's
time was reporting the machine, not the systems. Each run records, around its measured part:
- `load_before` / `load_after`: the 1-minute load average (`os.getloadavg`); it counts this run's own
  processes (and, in a sweep, the previous run's), so it is shown, not judged, where the next figure exists;
- `others_cpu_share`: the share of the machine's CPU time that processes other than this run's (this process
  and its descendants) used while it was measured (Linux: /proc/stat minus /proc/<pid>/stat), null elsewhere;
- `steal_share`: CPU time the hypervisor gave to other guests (/proc/stat `steal`), null where not reported;
- `cores`: the CPUs this process may run on;
- `step_ms`: per model, the mean engine step it measured (busy time / steps, at its mean batch size) beside
  the step time expected at that batch size, and where the expectation comes from: the model's start-up
  latency profile, its `latency_profile` file, its sim step times, or the committed reference's step times
  (results/demo, for the model set it was measured on).
`contention` turns a record into the reasons its timings are not comparable (none: fine): other processes'
share above OTHERS_SHARE, steal above STEAL_SHARE, the slowest model's steps above STEP_RATIO times their
expected time; reports and the demo print them beside a ratio instead of the bare number.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the committed demo run: its step times (demo.json `step_ms`) are the reference for its model set
REFERENCE_DIR = Path(__file__).resolve().parents[2] / "results" / "demo"
OTHERS_SHARE = 0.25  # others used more than this share of the machine's CPU time: contended
STEAL_SHARE = 0.10  # the hypervisor took more than this share: contended
STEP_RATIO = 2.0  # a model's steps took more than this multiple of the expected time: contended
SOURCES = ("start-up profile", "latency profile file", "sim step times", "committed reference")


@dataclass(frozen=True)
class Snapshot:
    """What `snapshot` reads at one moment."""

    wall: float  # time.perf_counter()
    load: float | None  # 1-minute load average
    cpu: tuple[int, int, int] | None  # /proc/stat jiffies: (busy, steal, total)
    own: int | None  # jiffies this process and its descendants used (reaped children included)


def snapshot() -> Snapshot:
    """The load average and CPU counters now."""
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    return Snapshot(time.perf_counter(), load, _proc_stat(), _own_jiffies())


def _proc_stat() -> tuple[int, int, int] | None:
    """(busy, steal, total) jiffies over all CPUs from /proc/stat's `cpu` line; None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        return None
    values = [int(v) for v in fields[1:9]] + [0] * (9 - len(fields))
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return user + nice + system + irq + softirq, steal, sum(values[:8])


def _own_jiffies() -> int | None:
    """CPU jiffies of this process and every live descendant (each with its reaped children's), from /proc."""
    stats: dict[int, tuple[int, int]] = {}  # pid -> (ppid, jiffies)
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone, or not ours to read
        try:
            stats[int(entry)] = (int(rest[1]), sum(int(v) for v in rest[11:15]))  # utime stime cutime cstime
        except (ValueError, IndexError):
            continue
    me = os.getpid()
    if me not in stats:
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [me]
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo += children.get(pid, [])
    return total


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def record(before: Snapshot, after: Snapshot, step_ms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """summary.json `machine` (declared as run_record.Machine): the state between two snapshots and each
    model's step times (`step_times`)."""
    steal = others = None
    if before.cpu is not None and after.cpu is not None:
        busy, stolen, total = (a - b for a, b in zip(after.cpu, before.cpu, strict=True))
        if total > 0:
            steal = round(min(1.0, max(0.0, stolen / total)), 4)
            if before.own is not None and after.own is not None:
                others = round(min(1.0, max(0.0, (busy - (after.own - before.own)) / total)), 4)
    return {"cores": cores(), "load_before": _round(before.load), "load_after": _round(after.load),
            "others_cpu_share": others, "steal_share": steal, "step_ms": step_ms}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# ---- step times -------------------------------------------------------------------------------------------


def measured_steps(stats: Any, names: list[str]) -> dict[str, tuple[float, float]]:
    """model -> (mean ms per engine step, mean batch size) from a system's stats (`models.<name>` with
    `busy_s` and `steps`, also nested, e.g. query-level routing's per-model systems)."""
    found: dict[str, tuple[float, float]] = {}

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        models = node.get("models")
        if isinstance(models, dict):
            for name, figures in models.items():
                if name in names and isinstance(figures, dict) and name not in found:
                    steps, busy = figures.get("steps"), figures.get("busy_s")
                    if isinstance(steps, int) and steps > 0 and isinstance(busy, int | float) and busy > 0:
                        batch = figures.get("mean_batch_size")
                        found[name] = (1e3 * busy / steps, float(batch) if isinstance(batch, int | float) and batch > 0
                                       else 1.0)
        for value in node.values():
            walk(value)

    walk(stats)
    return found


def reference_step_ms(model_set: str | None, path: Path = REFERENCE_DIR) -> dict[str, dict[str, float]]:
    """The committed reference's decode step times (model -> {"1": ms, "8": ms}) when it was measured on
    `model_set`, else {}."""
    try:
        doc = json.loads((path / "demo.json").read_text())
    except (OSError, ValueError):
        return {}
    if not model_set or doc.get("models") != model_set or not isinstance(doc.get("step_ms"), dict):
        return {}
    return doc["step_ms"]


def step_times(stats: Any, models: list[Any], model_set: str | None,
               profiles: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per model of `models` (ModelSpecs) that stepped: the measured mean step, its mean batch size, the
    expected step at that batch size and its source (None when nothing to expect it from), and their ratio."""
    from tokenrouter.config import AUTO_PROFILE
    from tokenrouter.engine.latency import LatencyProfile
    from tokenrouter.engine.sim import sim_latency

    measured = measured_steps(stats, [m.name for m in models])
    reference = reference_step_ms(model_set)
    profiles = profiles if profiles is not None else (stats.get("latency_profiles") or {} if isinstance(stats, dict)
                                                      else {})
    out: dict[str, dict[str, Any]] = {}
    for spec in models:
        if spec.name not in measured:
            continue
        ms, batch = measured[spec.name]
        expected, source = None, None
        try:
            if isinstance(profiles.get(spec.name), dict):
                expected = LatencyProfile.from_dict(profiles[spec.name], spec.name).decode_ms(batch)
                source = SOURCES[0]
            elif spec.latency_profile and spec.latency_profile != AUTO_PROFILE:
                expected, source = LatencyProfile.from_json(spec.latency_profile).decode_ms(batch), SOURCES[1]
            elif spec.engine == "sim":
                expected, source = sim_latency(spec.sim).decode_ms(batch), SOURCES[2]
            elif spec.name in reference:
                table = tuple(sorted((int(b), float(v)) for b, v in reference[spec.name].items()))
                expected, source = LatencyProfile(table=table).decode_ms(batch), SOURCES[3]
        except Exception:  # noqa: BLE001 - an unreadable profile means no expectation, never a failed run
            expected, source = None, None
        ratio = ms / expected if expected and expected > 0 else None
        out[spec.name] = {"measured": round(ms, 4), "mean_batch": round(batch, 3),
                          "expected": None if expected is None else round(expected, 4), "source": source,
                          "ratio": None if ratio is None else round(ratio, 3)}
    return out


# ---- judgement ------------------------------------------------------------------------------------------


def contention(machine: Any) -> dict[str, tuple[float, str]]:
    """Why a run's timings are not comparable: kind -> (how bad, the reason in words); {} when none is known.
    Kinds: `others` (other processes' share of the CPU), `steal`, `load` (only where the others' share is
    unknown: the load average also counts this run's own processes), `step:<model>` (the slowest model's
    steps slower than expected)."""
    if not isinstance(machine, dict):
        return {}
    out: dict[str, tuple[float, str]] = {}
    count = machine.get("cores") or 1
    others = machine.get("others_cpu_share")
    if isinstance(others, int | float) and others > OTHERS_SHARE:
        out["others"] = (others, f"other processes used {others:.0%} of the machine's CPU time")
    steal = machine.get("steal_share")
    if isinstance(steal, int | float) and steal > STEAL_SHARE:
        out["steal"] = (steal, f"the hypervisor took {steal:.0%} of the CPU time (steal)")
    if others is None:
        loads = [v for v in (machine.get("load_before"), machine.get("load_after")) if isinstance(v, int | float)]
        if loads and max(loads) > count:
            out["load"] = (max(loads) / count, f"load average {max(loads):.1f} on {count} cores")
    # the slowest model's steps only: a fast model's mean step is mostly host work and the extends of hand-offs
    # (a 1 ms decode doubles with a prompt's prefill), which its decode-only expectation does not hold
    judged = [(f["expected"], name, f) for name, f in (machine.get("step_ms") or {}).items()
              if isinstance(f, dict) and all(isinstance(f.get(k), int | float) for k in ("expected", "ratio"))]
    if judged:
        _, name, figures = max(judged, key=lambda item: item[0])
        ratio = figures["ratio"]
        if ratio > STEP_RATIO:
            out[f"step:{name}"] = (ratio, f"the {name} model's steps took {figures['measured']:.3g} ms against "
                                          f"{figures['expected']:.3g} ms expected ({figures['source']}), "
                                          f"{ratio:.1f}x")
    return out


def worst(reasons: list[dict[str, tuple[float, str]]]) -> list[str]:
    """Several runs' reasons as one list: per kind, the worst run's."""
    merged: dict[str, tuple[float, str]] = {}
    for one in reasons:
        for kind, (how_bad, text) in one.items():
            if kind not in merged or how_bad > merged[kind][0]:
                merged[kind] = (how_bad, text)
    return [text for _, text in merged.values()]


def from_row(row: Any) -> dict[str, Any] | None:
    """A run's `machine` record back from a runs-table row (`tokenrouter.evals.store`: flattened `machine.*` columns)."""
    machine: dict[str, Any] = {}
    for column, value in row.items():
        column = str(column)
        if not column.startswith("machine.") or value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        node = machine
        *path, leaf = column.removeprefix("machine.").split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value.item() if hasattr(value, "item") else value
    return machine or None


def contended(rows: Any) -> list[str]:
    """The reasons the runs of a runs-table frame (e.g. both sides of a comparison) are contended, worst per kind."""
    return worst([contention(from_row(row)) for _, row in rows.iterrows()])


def note(reasons: list[str]) -> str:
    """One sentence for a contended comparison (empty when there is no reason)."""
    if not reasons:
        return ""
    return "contended: " + "; ".join(reasons) + ", so this ratio measures the machine as much as the systems"
