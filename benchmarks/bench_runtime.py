"""Runtime figures: per-iteration scheduler + IPC overhead, hand-off round trip, threshold validation.

  .venv/bin/python benchmarks/bench_runtime.py                 # everything (~4 min)
  .venv/bin/python benchmarks/bench_runtime.py overhead batch loop handoff
  .venv/bin/python benchmarks/bench_runtime.py thresholds --window 20

overhead:   zero-latency sim engine, one model (`stay`): the subserver's own loop time per iteration minus
            the engine step (median, measured inside the subserver: receive, schedule, step inputs, settle),
            and the end-to-end token rate at the client (front end included). Goal <= 100 us.
batch:      what one more request in a decode batch costs: one zero-latency sim model (`stay`) in this process,
            batches of 1-256, CPU per request per step, the engine step + route and the runtime apart. What a
            GPU deployment's large batches pay on the CPU every step (256 x 5 us = 1.3 ms of a 20 ms decode step).
gc:         the cyclic GC's pauses during `batch`'s 256-request run with torch imported: a full collection walks
            every object start-up made unless they are frozen (as subserver.main does), alternating both ways.
loop:       the hand-off round trip's own CPU cost: the two subservers of `handoff` in this one process over
            real direct links, iterating in turn (a subserver with nothing to do polls once more, where a
            blocked one would wake): no wake-ups, no scheduling, no other process. The floor `handoff` stands on,
            as this thread's CPU time (time other tenants take from it does not count; their cache use does).
handoff:    two zero-latency sim engines, bernoulli route_prob=1: every token is small step -> hand-off ->
            large step (commit) -> hand-off back, so the median gap between streamed tokens is one hand-off
            round trip (two engine iterations included), for each `--links` x `--spin-us` x `--event-loops`
            (the front end's loop: tokenrouter/event_loop.py) setting in alternating rounds. Goal <= 150 us
            idle, <= 250 us with `--burn`. Also the mean (wall time / tokens):
            when the front end falls behind (3 processes, 2 cores) it delivers queued tokens back to back and
            the median of gaps reads low, the mean does not. And each process's CPU per round trip.
thresholds: the paper's validation setting (sim 6.0 / 27.9 ms, bernoulli 0.35, thresholds [1, B1], N closed-loop
            requests that never finish inside the window, max-wait disabled): measured committed tokens / s
            next to the throughput model's prediction (tokenrouter.perfmodel), at the nominal latencies and
            route_prob and at the step times and hand-off rate the window actually had. Seeded decisions over
            a 20 s window sample ~2-4k hand-off draws: +-1-2% of throughput is sampling noise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import idle_state
import zmq
from burner import Burner
from proc_stat import cpu_seconds

from tokenrouter import event_loop
from tokenrouter.algorithms import build_algorithm
from tokenrouter.config import AlgorithmSpec, ModelSpec, RuntimeConfig, SimSpec
from tokenrouter.engine.base import SamplingParams
from tokenrouter.engine.sim import SimEngine
from tokenrouter.generation import GenerationRequest
from tokenrouter.heap import freeze_startup
from tokenrouter.runtime import unix_link
from tokenrouter.runtime.frontend import TokenRouterFrontend
from tokenrouter.runtime.ipc import bind_inbox
from tokenrouter.runtime.messages import Peers, RequestMeta, Submit
from tokenrouter.runtime.subserver import Subserver, SubserverConfig
from tokenrouter.runtime.threshold_planner import auto_table
from tokenrouter.runtime.thresholds import ThresholdTable

PAPER_LATENCIES_MS = (6.0, 27.9)
PAPER_ROUTE_PROB = 0.35


def _sim(name: str, ms: float, seed: int) -> ModelSpec:
    return ModelSpec(name=name, engine="sim", kv_tokens=10**7, sim=SimSpec(latency_ms=ms, seed=seed))


async def _token_gaps_us(fe: TokenRouterFrontend, tokens: int, concurrency: int) -> list[float]:
    gaps: list[float] = []

    async def one(i: int) -> None:
        last = None
        async for ev in fe.stream(GenerationRequest([1, 2, 3, i], max_new_tokens=tokens, seed=i)):
            now = time.perf_counter()
            if last is not None and ev.token_ids:
                gaps.append((now - last) * 1e6 / len(ev.token_ids))
            last = now

    await asyncio.gather(*(one(i) for i in range(concurrency)))
    return gaps


async def overhead(tokens: int) -> None:
    print("== scheduler + IPC overhead per iteration (zero-latency sim, one model) ==")
    async with TokenRouterFrontend([_sim("m", 0.0, 1)], AlgorithmSpec("stay"), RuntimeConfig()) as fe:
        for conc in (1, 8):
            await _token_gaps_us(fe, 200, conc)  # warm-up
            t0 = time.perf_counter()
            await _token_gaps_us(fe, tokens, conc)
            elapsed = time.perf_counter() - t0
            s = fe.stats()["models"]["m"]
            print(f"N={conc}: in-subserver overhead median {s['overhead_us_p50']:.1f} us/iteration "
                  f"(mean batch {s['mean_batch_size']:.2f}); end to end {conc * tokens / elapsed:,.0f} tok/s "
                  f"at the client ({elapsed * 1e6 / tokens:.1f} us per iteration of a request)")


class _InProcess:
    """Subservers of sim models in this one process over real direct links (and a front-end listener whose
    reports are read but not timed): the runtime's own CPU cost, without wake-ups, scheduling or other processes."""

    def __init__(self, models: list[ModelSpec], algorithm: str, params: dict) -> None:
        self.where = tempfile.mkdtemp(prefix="tokenrouter-loop-")
        self.ctx = zmq.Context()
        self.front = unix_link.Listener(unix_link.frontend_path(self.where))
        rt = RuntimeConfig(thresholds=[1] * len(models), peer_link="direct", max_batch_size=1024)
        self.subs: list[Subserver] = []
        for i, m in enumerate(models):
            cfg = SubserverConfig(i, models, AlgorithmSpec(algorithm, params), rt, "", self.where)
            inbox, _ = bind_inbox(self.ctx, "ipc", self.where, f"model{i}")
            algo = build_algorithm(algorithm, i, [x.name for x in models], params)
            self.subs.append(Subserver(cfg, SimEngine.from_spec(m), algo, self.ctx, inbox,
                                       unix_link.connect(unix_link.frontend_path(self.where)),
                                       unix_link.Listener(unix_link.peer_path(self.where, i))))
            self.subs[-1].io.listen()
        self.reports = self.front.accept()
        for sub in self.subs:
            sub.handle(Peers([""] * len(models)))
        self.passes = 0

    def submit(self, rid: str, max_new_tokens: int) -> None:
        self.subs[0].handle(Submit(rid, [1, 2, 3], RequestMeta(max_new_tokens, SamplingParams(), 7, [])))

    def iterate(self) -> None:
        """One pass: every subserver with work iterates once (a blocked one would have woken)."""
        for sub in self.subs:
            if sub.busy() or sub.io.poll(0):
                sub.iterate(block=False)
        self.passes += 1
        if self.passes % 64 == 0:  # keep the reports' socket buffers from filling
            for link in self.reports:
                link.recv_frames()

    def close(self) -> None:
        for io in (sub.io for sub in self.subs):
            for link in (*io.peers.values(), *io.links_in, io.to_frontend):
                link.close()
            io.listener.close()
            io.poller.close()
            io.inbox.close(linger=0)
        self.front.close()
        self.ctx.term()


def _loop_cost_us(tokens: int) -> float:
    """CPU microseconds of this thread per round trip of `loop` (after 100 tokens of warm-up): thread time, so
    the figure does not count the time other tenants of a shared machine take from it."""
    run = _InProcess([_sim("small", 0.0, 1), _sim("large", 0.0, 2)], "bernoulli", {"route_prob": 1.0})
    run.submit("r", tokens + 200)
    large = run.subs[1].counters  # every token is committed by the large model
    start, got0 = 0.0, 0
    while large.committed < tokens + 100:
        run.iterate()
        if not start and large.committed >= 100:
            start, got0 = time.thread_time(), large.committed
    elapsed = time.thread_time() - start
    run.close()
    return elapsed / (large.committed - got0) * 1e6


def _batch_cost_us(batch: int, steps: int) -> tuple[float, float]:
    """Microseconds per request per step with `batch` requests decoding together on one zero-latency sim model
    (`stay`): (everything, the engine step + route alone). Wall time for both (the engine's share is timed by
    the subserver with perf_counter): a preempted run reads high in both, so callers take the best of a few."""
    run = _InProcess([_sim("m", 0.0, 1)], "stay", {})
    for i in range(batch):
        run.submit(f"r{i}", steps + 50)
    sub = run.subs[0]
    while sub.counters.steps < 20:  # prefills done, every request decoding
        run.iterate()
    c0, s0, n0 = time.perf_counter(), sub.counters.step_s, sub.counters.batch_total
    while sub.counters.batch_total - n0 < batch * steps:
        run.iterate()
    elapsed, engine = time.perf_counter() - c0, sub.counters.step_s - s0
    rows = sub.counters.batch_total - n0
    run.close()
    return elapsed / rows * 1e6, engine / rows * 1e6


def batch(steps: int) -> None:
    print("== per-request cost of a decode step (one zero-latency sim model, `stay`, one process) ==")
    for size in (1, 16, 64, 256):
        total, engine = min(_batch_cost_us(size, steps) for _ in range(3))
        print(f"batch {size:>3}: {total:6.2f} us per request-step ({engine:.2f} of it the sim engine step + "
              f"route, {total - engine:.2f} the runtime), best of 3", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


class _GcPauses:
    """A gc.callbacks hook: each collection's pause, per generation."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)


def gc_pauses(steps: int) -> None:
    """The cyclic GC's pauses in a subserver-like heap (torch imported, as a torch / SGLang subserver has it)
    over `batch`'s 256-request run (its set-up included), with the start-up heap tracked and frozen (as
    tokenrouter.heap.freeze_startup() does in every subserver)."""
    import gc

    import torch  # noqa: F401  (its ~150k objects are what a full collection walks)

    print("== cyclic GC pauses, 256 requests decoding, torch imported (every subserver freezes its start-up heap) ==")
    for frozen in (False, True, False, True):
        if frozen:
            freeze_startup()
        timed = _GcPauses()
        gc.callbacks.append(timed)
        total, _ = _batch_cost_us(256, steps)
        gc.callbacks.remove(timed)
        gc.unfreeze()
        pauses, full = timed.pauses, timed.pauses[2]
        print(f"{'frozen' if frozen else 'tracked'}: {total:.2f} us per request-step; full collections "
              f"{len(full)}, longest {max(full, default=0) * 1e3:.1f} ms; young ones {len(pauses[0]) + len(pauses[1])} "
              f"in {sum(pauses[0] + pauses[1]) * 1e3:.1f} ms", flush=True)


def loop(tokens: int) -> None:
    print("== hand-off round trip, loop CPU only (both subservers in one process, zero-latency sims) ==")
    costs = sorted(_loop_cost_us(tokens) for _ in range(5))
    print(f"loop cost per round trip: min {costs[0]:.1f} us, median {statistics.median(costs):.1f} us of 5 runs "
          f"(other tenants only add to it; load average {os.getloadavg()[0]:.1f})")


async def _handoff_once(link: str, spin: float, tokens: int) -> tuple[list[float], float, list[float]]:
    """One front end at this (peer link, spin): token gaps (us), wall seconds, CPU seconds of the front end +
    client and of each subserver over `tokens` round trips (after 500 of warm-up)."""
    models = [_sim("small", 0.0, 1), _sim("large", 0.0, 2)]
    algo = AlgorithmSpec("bernoulli", {"route_prob": 1.0})
    async with TokenRouterFrontend(models, algo, RuntimeConfig(thresholds=[1, 1], peer_link=link, spin_us=spin)) as fe:
        await _token_gaps_us(fe, 500, 1)
        before = [time.process_time(), *(cpu_seconds(pid) for pid in fe.pids)]
        t0 = time.perf_counter()
        gaps = await _token_gaps_us(fe, tokens, 1)
        wall = time.perf_counter() - t0
        after = [time.process_time(), *(cpu_seconds(pid) for pid in fe.pids)]
    return gaps, wall, [b - a for a, b in zip(before, after, strict=True)]


def handoff(tokens: int, rounds: int, links: list[str], spins: list[float], loops: list[str]) -> None:
    """Every (peer link, spin, front-end event loop) setting in alternating rounds of one run, so load changes on
    a shared machine hit all alike; the ratios to the first setting are the figures to quote."""
    print("== hand-off round trip (zero-latency sims, route_prob=1: small -> large -> small per token) ==")
    keys = [(link, spin, loop) for link in links for spin in spins for loop in loops]
    gaps: dict[tuple[str, float, str], list[float]] = {key: [] for key in keys}
    cpu = {key: [0.0, 0.0, 0.0] for key in keys}  # front end + client, small, large
    wall = dict.fromkeys(keys, 0.0)
    for _ in range(rounds):
        for link, spin, loop in keys:
            g, w, c = event_loop.run(_handoff_once(link, spin, tokens // rounds), loop)
            gaps[link, spin, loop] += g
            wall[link, spin, loop] += w
            cpu[link, spin, loop] = [a + b for a, b in zip(cpu[link, spin, loop], c, strict=True)]
    first = statistics.median(gaps[keys[0]])
    for (link, spin, loop), g in gaps.items():
        median = statistics.median(g)
        front, small, large = (c * 1e6 / len(g) for c in cpu[link, spin, loop])
        print(f"peer_link={link} spin_us={spin:g} event loop {loop}: round trip median {median:.1f} us "
              f"(p90 {statistics.quantiles(g, n=10)[-1]:.1f}), mean {wall[link, spin, loop] * 1e6 / len(g):.1f} us "
              f"over {len(g)} tokens, {first / median:.2f}x the first; CPU per round trip: front end + client "
              f"{front:.0f} us, small {small:.0f}, large {large:.0f}")
    print(f"load average {os.getloadavg()[0]:.1f}; {idle_state.describe()}")


def _predictor():
    """(n, thresholds, step latencies ms, hand-off rate) -> predicted tok/s from the throughput model, or None
    without it."""
    try:
        from tokenrouter.perfmodel.chain import throughput
        from tokenrouter.perfmodel.spec import SystemSpec
    except ImportError:
        return None
    def predict(n: int, b: list[int], latencies_ms: list[float], p: float = PAPER_ROUTE_PROB) -> float:
        spec = SystemSpec.build([[1 - p, p], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], latencies_ms, quantum_ms=0.1)
        return throughput(spec, n, b).throughput_tok_s

    return predict


async def _closed_loop(fe: TokenRouterFrontend, n: int, warmup_s: float,
                       window_s: float) -> tuple[float, list[float], list[float], float]:
    """N requests that outlive the window: committed tokens per second over the window (subserver counters),
    per model the mean step time (ms) and batch size actually seen, and the small model's realized hand-off
    rate (decisions are seeded per (request, position), so a window's sample can sit a few % off route_prob)."""
    async def snap() -> tuple[float, dict]:
        stats = await fe.refresh_stats()
        return time.perf_counter(), stats["models"]

    reqs = [GenerationRequest([7, 8, 9, i], max_new_tokens=50_000, seed=1000 + i) for i in range(n)]
    tasks = [asyncio.create_task(fe.generate(r)) for r in reqs]
    await asyncio.sleep(warmup_s)
    t0, s0 = await snap()
    await asyncio.sleep(window_s)
    t1, s1 = await snap()
    for t in tasks:
        t.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [o for o in outcomes if not isinstance(o, asyncio.CancelledError)]
    if errors:
        raise RuntimeError(f"closed-loop request failed: {errors[0]!r}")
    await asyncio.sleep(0.3)  # aborts reach the subservers before the next configuration starts
    committed = sum(s1[m]["tokens_committed"] - s0[m]["tokens_committed"] for m in s1)
    step_ms, batch = [], []
    for m in s1:
        steps = max(1, s1[m]["steps"] - s0[m]["steps"])
        step_ms.append((s1[m]["busy_s"] - s0[m]["busy_s"]) * 1e3 / steps)
        batch.append((s1[m]["mean_batch_size"] * s1[m]["steps"] - s0[m]["mean_batch_size"] * s0[m]["steps"]) / steps)
    small = list(s1)[0]
    routed = [c1 - c0 for c0, c1 in zip(s0[small]["route_counts"].values(), s1[small]["route_counts"].values(),
                                         strict=True)]
    return committed / (t1 - t0), step_ms, batch, routed[1] / max(1, sum(routed))


def _pct(measured: float, predicted: float | None) -> str:
    return f"{(measured - predicted) / predicted:+.1%}" if predicted else "n/a"


async def thresholds(window_s: float, warmup_s: float, ns: list[int], link: str, spin_us: float) -> None:
    print(f"== threshold validation: sim {PAPER_LATENCIES_MS[0]} / {PAPER_LATENCIES_MS[1]} ms, bernoulli "
          f"{PAPER_ROUTE_PROB}, thresholds [1, B1], closed loop, {window_s:g} s window, "
          f"peer_link={link} spin_us={spin_us:g}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs ==")
    print("predicted: the throughput model at the nominal latencies and route_prob; 'at measured': at the mean "
          "step times the sim engines actually took (sleep overshoot) and the hand-off rate the window's seeded "
          "decisions actually had (p), which isolates runtime overheads from sampling noise.")
    predict = _predictor()
    models = [_sim("small", PAPER_LATENCIES_MS[0], 1), _sim("large", PAPER_LATENCIES_MS[1], 2)]
    algo = AlgorithmSpec("bernoulli", {"route_prob": PAPER_ROUTE_PROB})
    rt = RuntimeConfig(thresholds=[1, 1], max_wait_ms=1e9, peer_link=link, spin_us=spin_us)
    auto_rows = auto_table(models, algo, max(ns)) if predict else None
    print(f"{'N':>2} {'B1':>3} {'measured':>9} {'predicted':>10} {'error':>7} {'at measured':>12} {'error':>7}"
          f"      p   step ms (small, large)  mean batch")
    async with TokenRouterFrontend(models, algo, rt) as fe:
        for n in ns:
            rows = []
            for b1 in range(1, n + 1):
                fe.thresholds = ThresholdTable([1, b1], 2)  # sent to subservers with the next admission
                measured, step_ms, batch, p = await _closed_loop(fe, n, warmup_s, window_s)
                nominal = predict(n, [1, b1], list(PAPER_LATENCIES_MS)) if predict else None
                actual = predict(n, [1, b1], step_ms, p) if predict else None
                rows.append((b1, measured, nominal))
                print(f"{n:>2} {b1:>3} {measured:9.2f} {nominal or float('nan'):10.2f} {_pct(measured, nominal):>7} "
                      f"{actual or float('nan'):12.2f} {_pct(measured, actual):>7} {p:6.3f}   "
                      f"{step_ms[0]:6.2f} {step_ms[1]:6.2f}        {batch[0]:.2f} {batch[1]:.2f}", flush=True)
            best_m = max(rows, key=lambda r: r[1])[0]
            best_p = max(rows, key=lambda r: r[2])[0] if predict else None
            auto = f", thresholds=auto picks {auto_rows[n]}" if auto_rows else ""
            print(f"   N={n}: best measured B1={best_m}, best predicted B1={best_p}{auto}", flush=True)


SECTIONS = ("overhead", "batch", "gc", "loop", "handoff", "thresholds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sections", nargs="*", metavar="{overhead,batch,gc,loop,handoff,thresholds}",
                    help="which figures (default: all)")
    ap.add_argument("--tokens", type=int, default=5000, help="tokens per request for overhead / loop / handoff")
    ap.add_argument("--steps", type=int, default=200, help="batch: decode steps measured per batch size")
    ap.add_argument("--window", type=float, default=20.0, help="measurement window per threshold setting (s)")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=4, help="handoff: rounds, each over every setting in turn")
    ap.add_argument("--links", default="direct,zmq",
                    help="handoff: runtime.peer_link settings to alternate (thresholds: the first)")
    ap.add_argument("--spin-us", default="0",
                    help="handoff: runtime.spin_us settings to alternate, e.g. 0,200 (thresholds: the first)")
    ap.add_argument("--event-loops", default=os.environ.get(event_loop.ENV, "auto"),
                    help="handoff: the front end's $TOKENROUTER_EVENT_LOOP settings to alternate, e.g. auto,asyncio "
                         "(the other sections: the first)")
    ap.add_argument("--burn", action="store_true", help="run one CPU-bound background process meanwhile")
    ap.add_argument("--n", type=int, nargs="+", default=[2, 3, 4], help="concurrency levels to validate")
    args = ap.parse_args()
    args.sections = args.sections or list(SECTIONS)
    if unknown := set(args.sections) - set(SECTIONS):
        ap.error(f"unknown section(s) {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    first_loop = args.event_loops.split(",")[0]
    with Burner(args.burn):
        if "overhead" in args.sections:
            event_loop.run(overhead(args.tokens), first_loop)
        if "batch" in args.sections:
            batch(args.steps)
        if "gc" in args.sections:
            gc_pauses(2 * args.steps)
        if "loop" in args.sections:
            loop(args.tokens)
        if "handoff" in args.sections:
            handoff(args.tokens, args.rounds, args.links.split(","), [float(x) for x in args.spin_us.split(",")],
                    args.event_loops.split(","))
        if "thresholds" in args.sections:
            event_loop.run(thresholds(args.window, args.warmup, args.n, args.links.split(",")[0],
                                   float(args.spin_us.split(",")[0])), first_loop)


if __name__ == "__main__":
    main()
