"""`tokenrouter model throughput|optimize|simulate`: the throughput model of delayed batching.

The system: a preset (r2r, citer, co_llm, bernoulli: --route-prob p; rstitch: --route-prob p01 --p10 p10;
ensemble: --weights) or a general --route-matrix / --commit-matrix ("0.65,0.35;1,0"); step latencies per
model from --latency-ms (constant) or one --latency-profile FILE per model (`tokenrouter profile` JSON).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tokenrouter.cli.args import ArgumentParser, float_list, int_list
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.errors import UserError
from tokenrouter.perfmodel.chain import throughput
from tokenrouter.perfmodel.compare import compare
from tokenrouter.perfmodel.optimize import OptimizeResult, optimize, optimize_table
from tokenrouter.perfmodel.plot import check_plot_path, plot_sweeps, setting_title, threshold_sweep
from tokenrouter.perfmodel.presets import PRESETS, preset
from tokenrouter.perfmodel.simulate import simulate
from tokenrouter.perfmodel.spec import SystemSpec
from tokenrouter.perfmodel.validity import model_validity, request_runs, step_traces

HELP = "throughput model: predict, optimize thresholds B*(N), simulate (throughput|optimize|simulate)"

EXAMPLE = (
    "example: tokenrouter model throughput --preset r2r --route-prob 0.35 --latency-ms 6.0,27.9 "
    "--quantum-ms 0.1 --concurrency 4 --thresholds 1,3 --json; "
    "tokenrouter model optimize --policy optimal --preset r2r --route-prob 0.35 --latency-ms 6.0,27.9 "
    "--max-concurrency 8"
)


def _matrix(text: str) -> list[list[float]]:
    try:
        return [[float(x) for x in row.split(",")] for row in text.split(";") if row.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected rows 'a,b;c,d' of numbers, got {text!r}") from None


def _fix(text: str) -> tuple[int, int]:
    try:
        model, value = text.split("=")
        return int(model), int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MODEL=THRESHOLD (e.g. 0=1), got {text!r}") from None


def _system_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("system")
    g.add_argument("--preset", choices=PRESETS, help="routing algorithm shape that builds P and C")
    g.add_argument("--route-prob", type=float, help="hand-off probability p (rstitch: small -> large p01)")
    g.add_argument("--p10", type=float, help="rstitch: large -> small probability")
    g.add_argument("--weights", type=float_list, help="ensemble: model weights, e.g. 0.5,0.3,0.2")
    g.add_argument("--route-matrix", type=_matrix, help='general routing matrix P, rows ";"-separated')
    g.add_argument("--commit-matrix", type=_matrix, help="tokens committed per step i -> j (default: all 1)")
    g.add_argument("--latency-ms", type=float_list, help="constant step latency per model, e.g. 6.0,27.9")
    g.add_argument(
        "--latency-profile",
        action="append",
        metavar="FILE",
        help="`tokenrouter profile` JSON, once per model",
    )
    g.add_argument("--quantum-ms", type=float, help="time quantum delta (default: slowest step / 200)")
    g.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="tokenrouter model", description=__doc__, epilog=EXAMPLE)
    sub = parser.add_subparsers(dest="action", required=True, metavar="{throughput,optimize,simulate}")
    tp = sub.add_parser("throughput", help="predicted throughput for N and thresholds B", epilog=EXAMPLE)
    tp.add_argument("--concurrency", type=int, required=True, help="N concurrent requests")
    tp.add_argument("--thresholds", type=int_list, required=True, help="B per model, e.g. 1,3")
    tp.add_argument(
        "--plot", metavar="FILE.png", help="also plot throughput against the last model's threshold"
    )
    _system_args(tp)
    op = sub.add_parser("optimize", help="best thresholds for N, or the table B*(N) for N = 1..max")
    group = op.add_mutually_exclusive_group(required=True)
    group.add_argument("--concurrency", type=int, help="N concurrent requests")
    group.add_argument("--max-concurrency", type=int, help="print the B*(N) table for N = 1..this")
    op.add_argument("--fix", type=_fix, action="append", default=[], metavar="I=B", help="hold model I at B")
    op.add_argument("--plot", metavar="FILE.png", help="plot throughput against the last model's threshold")
    op.add_argument("--policy", choices=("thresholds", "optimal"), default="thresholds",
                    help="optimal: also solve the optimal launch policy and the best rule on a subserver's own "
                         "queue, and print them against the best thresholds")
    _system_args(op)
    sm = sub.add_parser("simulate", help="event simulation with a 95%% confidence interval")
    sm.add_argument("--concurrency", type=int, required=True, help="N concurrent requests")
    sm.add_argument("--thresholds", type=int_list, required=True, help="B per model, e.g. 1,3")
    sm.add_argument("--events", type=int, default=100_000, help="batch completions to simulate")
    sm.add_argument("--seed", type=int, default=0)
    sm.add_argument(
        "--traces",
        metavar="FILE.jsonl",
        help="replay routing traces: one JSON list of model indices per line, or a run's requests.jsonl "
             "(its `model_runs`; also prints the chain's prediction and the geometric-fit verdict)",
    )
    sm.add_argument("--trace-models", type=lambda t: t.split(","), metavar="NAME,NAME",
                    help="requests.jsonl traces: model names in model order (default: from the summary.json "
                         "next to it)")
    sm.add_argument("--handoff-ms", type=float, default=0.0,
                    help="delay of every request that changes model (IPC), which the chain leaves out")
    _system_args(sm)
    return parser


def system_from_args(args: argparse.Namespace, max_n: int) -> SystemSpec:
    if args.preset and args.route_matrix:
        raise UserError("give either --preset or --route-matrix, not both")
    if args.preset:
        route, commit = preset(args.preset, route_prob=args.route_prob, p10=args.p10, weights=args.weights)
    elif args.route_matrix:
        route = args.route_matrix
        commit = args.commit_matrix or [[1.0] * len(route) for _ in route]
    else:
        raise UserError("describe the routing: --preset NAME or --route-matrix 'a,b;c,d'")
    if args.preset and args.commit_matrix:
        commit = args.commit_matrix
    if bool(args.latency_ms) == bool(args.latency_profile):
        raise UserError(
            "give step latencies with exactly one of --latency-ms or --latency-profile (once per model)"
        )
    latencies = (
        [LatencyProfile.constant(x) for x in args.latency_ms]
        if args.latency_ms
        else [LatencyProfile.from_json(f) for f in args.latency_profile]
    )
    return SystemSpec.build(route, commit, latencies, args.quantum_ms, max_concurrency=max_n)


def _trace_names(path: str, given: list[str] | None) -> list[str]:
    """Model names of a requests.jsonl in model order: given, or the run's summary.json (`tokens_per_model`)."""
    if given:
        return given
    summary = Path(path).parent / "summary.json"
    try:
        return list(json.loads(summary.read_text())["tokens_per_model"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"traces {path}: name the models in order with --trace-models (no readable {summary})") from None


def _load_traces(path: str) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """(index traces, requests.jsonl rows with `model_runs`): a file holds one kind or the other."""
    traces, rows = [], []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    item = json.loads(line)
                    if isinstance(item, dict) and "model_runs" in item:
                        rows.append(item)
                    else:
                        traces.append(item["models"] if isinstance(item, dict) else item)
    except FileNotFoundError:
        raise UserError(f"traces file not found: {path}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UserError(
            f"traces file {path}: expected one JSON list of model indices per line ({exc})"
        ) from None
    return traces, rows


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    print(json.dumps(payload) if args.json else text)


def _plot(args: argparse.Namespace, spec: SystemSpec, bests: dict[int, tuple[int, ...]]) -> None:
    curves = {n: threshold_sweep(spec, n, list(b[:-1])) for n, b in bests.items()}
    out = plot_sweeps(curves, args.plot, title=f"predicted throughput: {setting_title(spec)}")
    if not args.json:
        print(f"plot written to {out}")


def _run_throughput(args: argparse.Namespace) -> int:
    spec = system_from_args(args, args.concurrency)
    res = throughput(spec, args.concurrency, args.thresholds)
    payload = {
        "throughput_tok_s": res.throughput_tok_s,
        "num_states": res.num_states,
        "feasible": res.feasible,
    }
    text = (
        f"N={args.concurrency} thresholds={args.thresholds} quantum={spec.quantum_ms:g} ms: "
        f"{res.throughput_tok_s:.2f} tok/s ({res.num_states} states)\n"
        + "\n".join(
            f"  model {i}: {s:.1f} request-steps/s, mean batch {b:.2f}"
            for i, (s, b) in enumerate(zip(res.step_rate, res.mean_batch, strict=True))
        )
    )
    _emit(args, payload, text)
    if args.plot:
        _plot(args, spec, {args.concurrency: tuple(args.thresholds)})
    return 0


def _table_text(table: dict[int, OptimizeResult]) -> str:
    """Markdown: one row per N, one column per value of the last model's threshold, then the best."""
    width = max(max(e.thresholds[-1] for e in res.evaluated) for res in table.values())
    head = (
        "| N | "
        + " | ".join(f"B_last={b}" for b in range(1, width + 1))
        + " | best B | best tok/s | exhaustive |"
    )
    lines = [head, "|" + "---|" * (width + 4)]
    for n, res in table.items():
        by_last: dict[int, float] = {}
        for e in res.evaluated:
            by_last[e.thresholds[-1]] = max(by_last.get(e.thresholds[-1], 0.0), e.throughput_tok_s)
        cells = [f"{by_last[b]:.2f}" if b in by_last else "" for b in range(1, width + 1)]
        best = res.best
        lines.append(
            f"| {n} | " + " | ".join(cells) + f" | {list(best.thresholds)} | {best.throughput_tok_s:.2f} | "
            f"{'yes' if res.exhaustive else 'no'} |"
        )
    return "\n".join(lines)


def _run_policy(args: argparse.Namespace) -> int:
    """`optimize --policy optimal`: best thresholds vs best local rule vs the full-state optimum, per N."""
    if args.fix or args.plot:
        raise UserError("--policy optimal takes neither --fix nor --plot")
    ns = [args.concurrency] if args.concurrency is not None else list(range(1, args.max_concurrency + 1))
    spec = system_from_args(args, max(ns))
    rows = [compare(spec, n) for n in ns]
    lines = [f"quantum {spec.quantum_ms:g} ms; optimal: knows every queue and running batch; local: the best "
             "rule on a subserver's own queue and N (what runtime.policy=optimal runs)",
             "| N | best B | thresholds tok/s | local tok/s | optimal tok/s | optimal gap | local gap |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.n} | {list(r.thresholds)} | {r.thresholds_tok_s:.2f} | {r.local_tok_s:.2f} | "
              f"{r.optimal_tok_s:.2f} | {100 * r.gap:+.2f}% | {100 * r.local_gap:+.2f}% |" for r in rows]
    _emit(args, {"table": [r.to_dict() for r in rows]}, "\n".join(lines))
    return 0


def _run_optimize(args: argparse.Namespace) -> int:
    if args.policy == "optimal":
        return _run_policy(args)
    fixed = dict(args.fix)
    if args.max_concurrency is not None:
        spec = system_from_args(args, args.max_concurrency)
        table = optimize_table(spec, args.max_concurrency, fixed=fixed)
        payload = {
            "table": [
                {
                    "concurrency": n,
                    "thresholds": list(res.best.thresholds),
                    "throughput_tok_s": res.best.throughput_tok_s,
                    "exhaustive": res.exhaustive,
                }
                for n, res in table.items()
            ]
        }
    else:
        spec = system_from_args(args, args.concurrency)
        table = {args.concurrency: optimize(spec, args.concurrency, fixed=fixed)}
        payload = table[args.concurrency].to_dict()
    _emit(
        args,
        payload,
        f"quantum {spec.quantum_ms:g} ms (values: predicted tok/s, best over other thresholds)\n"
        + _table_text(table),
    )
    if args.plot:
        _plot(args, spec, {n: res.best.thresholds for n, res in table.items()})
    return 0


def _run_simulate(args: argparse.Namespace) -> int:
    spec = system_from_args(args, args.concurrency)
    traces, rows = _load_traces(args.traces) if args.traces else (None, [])
    validity = None
    if rows:
        names = _trace_names(args.traces, args.trace_models)
        traces = step_traces(request_runs(rows, names), spec.route, spec.commit)
        validity = model_validity(rows, names)
    res = simulate(spec, args.concurrency, args.thresholds, events=args.events, seed=args.seed, traces=traces,
                   handoff_ms=args.handoff_ms)
    payload: dict[str, Any] = {
        "throughput_tok_s": res.throughput_tok_s,
        "ci95": [res.ci_low, res.ci_high],
        "events": res.events,
        "simulated_s": res.simulated_s,
    }
    text = (
        f"N={args.concurrency} thresholds={args.thresholds}: {res.throughput_tok_s:.2f} tok/s "
        f"(95% CI {res.ci_low:.2f} .. {res.ci_high:.2f}; {res.events} events, {res.simulated_s:.1f} s simulated)"
    )
    if validity is not None:
        chain = throughput(spec, args.concurrency, args.thresholds).throughput_tok_s
        payload.update(chain_throughput_tok_s=chain, model_validity=validity)
        fits = "; ".join(f"{f['model']}: {f['runs']} runs, mean {f['mean_run']:.2f}, dispersion "
                         f"{f['dispersion'] if f['dispersion'] is None else round(f['dispersion'], 2)}, drift "
                         f"{f['drift'] if f['drift'] is None else round(f['drift'], 2)}"
                         for f in validity["models"])
        text += (f"\nreplayed the run's traces; the chain (geometric, stationary) predicts {chain:.2f} tok/s "
                 f"({res.throughput_tok_s / chain - 1:+.1%} replay vs chain)\nin the model's regime: "
                 f"{validity['in_regime']} ({fits})")
    _emit(args, payload, text)
    return 0


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "plot", None):
        check_plot_path(args.plot)
    action = {"throughput": _run_throughput, "optimize": _run_optimize, "simulate": _run_simulate}
    return action[args.action](args)
