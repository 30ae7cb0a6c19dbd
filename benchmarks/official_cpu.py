"""The paper's comparison against the real peer, on this CPU: official R2R vs lock-step R2R vs TokenRouter, and the
official mixture-ensemble code vs TokenRouter's ensemble.

`make official-cpu` runs this after building the official code's environments (scripts/official_r2r_env.sh,
scripts/official_ensemble_env.sh). Steps: the local pair's R2R router (the one `tokenrouter demo` trains,
cached); `tokenrouter bench -m +experiment=official_cpu` (each run alone: Hydra runs them one after another)
into OUT/r2r; `+experiment=official_cpu_ensemble` into OUT/ensemble, plus the official ensemble replaying
TokenRouter's model draws into OUT/ensemble_replay; then OUT/results.csv (every run, its `system` column naming
official_r2r, lockstep, tokenrouter, official_ensemble), OUT/agreement.csv (outputs compared token by token per
pair of systems, tokenrouter/evals/agreement.py) and OUT/summary.md (tokens/s, large-model share, accuracy, TokenRouter /
official at each N next to the paper's figures). A system whose environment is absent is skipped with one line.
Usage: python benchmarks/official_cpu.py [--out runs/official_cpu] [--problems 32] [--concurrency 1,4,8] [--smoke]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tokenrouter.evals.agreement import compare, load_requests, pairs

OFFICIAL_ENV = Path(".venv-r2r/R2R")
ENSEMBLE_ENV = Path(".venv-ensemble/bin/python")
# its code: $ENSEMBLE_SRC (make official-cpu passes its ENSEMBLE_SRC), else the snapshot beside this repository
ENSEMBLE_SRC = Path(os.environ.get("ENSEMBLE_SRC") or "../shared/third_party/mixture-model-like-ensemble-cbe532b")
SYSTEMS = ("official_r2r", "lockstep", "tokenrouter")
# The paper's ablation (official R2R tok/s at N = 8 / 4 / 1, GPUs) and its Table 3 range of TokenRouter /
# official R2R; printed beside ours for the shape, never as comparable figures (GPU models vs a CPU toy pair).
PAPER_OFFICIAL_TOK_S = {8: 134.89, 4: 73.27, 1: 36.17}
PAPER_SPEEDUP = "1.99-3.21x"


def router_path(smoke: bool) -> Path:
    """The demo's R2R router for the local pair (trained into the cache on first use)."""
    from tokenrouter.cli.demo import ensure_router, models_stamp
    from tokenrouter.cli.hydra_config import compose
    from tokenrouter.config import model_specs

    demo = compose(["+experiment=demo"]).demo
    settings = dict(demo.routers)
    overrides: list[str] = []
    if smoke:
        settings.update(demo.smoke.routers)
        overrides = list(demo.smoke.overrides)
    cfg = compose(["+experiment=demo", *overrides])
    return ensure_router(str(cfg.models.name), models_stamp(model_specs(cfg.models)), "r2r", settings, overrides)


def bench(overrides: list[str]) -> int:
    cmd = [sys.executable, "-m", "tokenrouter", "bench", *overrides]
    print("$ tokenrouter bench " + " ".join(overrides), flush=True)
    return subprocess.run(cmd, check=False).returncode


def run_r2r(out: Path, router: Path, systems: list[str], args: argparse.Namespace) -> int:
    return bench(["-m", "+experiment=official_cpu", f"++models.routers.r2r={router}",
                  f"hydra.sweep.dir={out / 'r2r'}", f"concurrency={args.concurrency}", f"system={','.join(systems)}",
                  f"workload.num_problems={args.problems}", f"workload.max_new_tokens={args.tokens}"])


def run_ensemble(out: Path, args: argparse.Namespace) -> int:
    """TokenRouter's ensemble, the official code, and the official code replaying our draws (system.* fields
    are the official system's own, so each is a sweep of its own)."""
    common = ["-m", "+experiment=official_cpu_ensemble", f"workload.num_problems={args.problems}",
              f"workload.max_new_tokens={args.tokens}"]
    official = ["system=official_ensemble", f"system.repo={ENSEMBLE_SRC.resolve()}"]
    status = bench([*common, "system=tokenrouter", f"hydra.sweep.dir={out / 'ensemble'}"])
    status = bench([*common, *official, f"hydra.sweep.dir={out / 'ensemble'}"]) or status
    replay = [*common, *official, "system.draws=tokenrouter", f"hydra.sweep.dir={out / 'ensemble_replay'}"]
    return bench(replay) or status


def point_dir(sweep: Path, system: str, n: int) -> Path | None:
    """The run dir of one system at one N (Hydra's override_dirname subdir)."""
    for summary in sorted(sweep.glob("*/summary.json")):
        doc = json.loads(summary.read_text())
        if doc.get("system") == system and int(doc.get("concurrency", -1)) == n:
            return summary.parent
    return None


def agreement_rows(n: int, runs: dict[str, Path]) -> list[dict]:
    """One agreement.csv row per pair of these runs (system -> run dir) at concurrency `n`."""
    loaded = {name: load_requests(d) for name, d in runs.items()}
    rows = []
    for a, b in pairs(loaded):
        agreement = compare(loaded[a], loaded[b])
        first = agreement.first
        rows.append({"concurrency": n, "a": a, "b": b, "requests": agreement.requests,
                     "identical": agreement.identical,
                     "first_difference": "" if first is None else f"{first.index}@{first.position}",
                     "cause": "" if first is None else first.cause})
    return rows


def merge_results(out: Path, parts: list[str]) -> None:
    """OUT/results.csv: every sweep's results.csv, one header."""
    rows: list[dict] = []
    for part in parts:
        path = out / part / "results.csv"
        if path.is_file():
            with path.open(newline="") as fh:
                rows += [{"sweep": part, **row} for row in csv.DictReader(fh)]
    if rows:
        fields = list(dict.fromkeys(k for row in rows for k in row))
        with (out / "results.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)


def collect(out: Path, systems: list[str], levels: list[int], load: tuple[str, str]) -> str:
    """summary.md and agreement.csv from the sweep's runs."""
    sweep = out / "r2r"
    lines = ["# Official R2R vs lock-step R2R vs TokenRouter on this CPU (local pair, arith, R2R router)", "",
             f"Load average before / after: {load[0]} / {load[1]} ({os.cpu_count()} cores).", "",
             "| N | system | tok/s | large share | accuracy | vs official R2R | paper: official tok/s (GPU) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    rows = []
    for n in levels:
        dirs = {s: point_dir(sweep, s, n) for s in systems}
        summaries = {s: json.loads((d / "summary.json").read_text()) for s, d in dirs.items() if d}
        base = summaries.get("official_r2r", {}).get("throughput_tok_s")
        for system, doc in summaries.items():
            tput = doc.get("throughput_tok_s") or 0.0
            ratio = f"{tput / base:.2f}x" if base else "-"
            paper = f"{PAPER_OFFICIAL_TOK_S[n]}" if system == "official_r2r" and n in PAPER_OFFICIAL_TOK_S else ""
            lines.append(f"| {n} | {system} | {tput:.1f} | {doc.get('large_token_share') or 0:.3f} | "
                         f"{doc.get('accuracy') or 0:.1%} | {ratio} | {paper} |")
        rows += agreement_rows(n, {s: d for s, d in dirs.items() if d})
    lines += ["", f"Paper (GPUs, Table 3): TokenRouter / official R2R {PAPER_SPEEDUP}.", "",
              "## Outputs token by token", "", "| N | systems | agreement |", "| --- | --- | --- |"]
    for row in rows:
        text = f"{row['identical']}/{row['requests']} identical"
        if row["first_difference"]:
            text += f"; first difference (request@token) {row['first_difference']}: {row['cause']}"
        lines.append(f"| {row['concurrency']} | {row['a']} vs {row['b']} | {text} |")
    ensemble_lines, ensemble_rows = ensemble_section(out)
    lines += ensemble_lines
    rows += ensemble_rows
    with (out / "agreement.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["concurrency", "a", "b", "requests", "identical",
                                                "first_difference", "cause"])
        writer.writeheader()
        writer.writerows(rows)
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def ensemble_section(out: Path) -> tuple[list[str], list[dict]]:
    """The ensemble's table (tok/s, per-model token shares against the weights, accuracy) and agreements."""
    runs = {"official_ensemble": point_dir(out / "ensemble", "official_ensemble", 1),
            "official_ensemble (replaying our draws)": point_dir(out / "ensemble_replay", "official_ensemble", 1),
            "tokenrouter": point_dir(out / "ensemble", "tokenrouter", 1)}
    runs = {k: v for k, v in runs.items() if v}
    if not runs:
        return [], []
    lines = ["", "## Mixture ensemble: the official code vs TokenRouter (N = 1, greedy)", "",
             "| system | tok/s | token shares (weights) | accuracy | vs official |", "| --- | --- | --- | --- | --- |"]
    docs = {k: json.loads((d / "summary.json").read_text()) for k, d in runs.items()}
    base = docs.get("official_ensemble", {}).get("throughput_tok_s")
    for name, doc in docs.items():
        config = json.loads((runs[name] / "summary.json").read_text()).get("config", {})
        weights = (config.get("algorithm") or {}).get("weights")
        counts = doc.get("tokens_per_model") or {}
        total = sum(counts.values()) or 1
        shares = " / ".join(f"{v / total:.3f}" for v in counts.values())
        tput = doc.get("throughput_tok_s") or 0.0
        lines.append(f"| {name} | {tput:.1f} | {shares} ({weights}) | {doc.get('accuracy') or 0:.1%} | "
                     f"{f'{tput / base:.2f}x' if base else '-'} |")
    rows = agreement_rows(1, runs)
    for row in rows:
        lines.append(f"- {row['a']} vs {row['b']}: {row['identical']}/{row['requests']} identical"
                     + (f"; first difference (request@token) {row['first_difference']}: {row['cause']}"
                        if row["first_difference"] else ""))
    return lines, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/official_cpu"))
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--smoke", action="store_true", help="2 problems x 16 tokens at N = 2, a small router")
    parser.add_argument("--summarize", action="store_true", help="only write summary.md / agreement.csv from OUT")
    args = parser.parse_args(argv)
    if args.summarize:
        systems = [s for s in SYSTEMS if any((args.out / "r2r").glob(f"*system={s}*"))]
        print(collect(args.out, systems, [int(x) for x in args.concurrency.split(",")], ("-", "-")), flush=True)
        return 0
    if args.smoke:
        args.problems, args.tokens, args.concurrency = 2, 16, "2"
    systems = list(SYSTEMS)
    if not OFFICIAL_ENV.is_dir():
        print(f"official R2R: no {OFFICIAL_ENV} (make official-venv): skipped, ours only", flush=True)
        systems.remove("official_r2r")
    ensemble = ENSEMBLE_ENV.exists() and ENSEMBLE_SRC.is_dir()
    if not ensemble:
        print(f"official ensemble: no {ENSEMBLE_ENV} or {ENSEMBLE_SRC} (scripts/official_ensemble_env.sh): skipped",
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    router = router_path(args.smoke)
    load_before = open("/proc/loadavg").read().split()[0]
    start = time.perf_counter()
    status = run_r2r(args.out, router, systems, args)
    if ensemble:
        status = run_ensemble(args.out, args) or status
    merge_results(args.out, ["r2r", "ensemble", "ensemble_replay"])
    load_after = open("/proc/loadavg").read().split()[0]
    levels = [int(x) for x in args.concurrency.split(",")]
    print(collect(args.out, systems, levels, (load_before, load_after)), flush=True)
    print(f"official-cpu: {time.perf_counter() - start:.0f}s, results in {args.out}", flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
