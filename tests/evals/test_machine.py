"""Results that say when they cannot be compared: every bench run records the machine's state (summary.json
`machine`: load average before and after, other processes' and the hypervisor's share of the CPU, cores, each
model's measured step time against the time expected for it), the summary validation checks it, and the demo
and report.html print a contended comparison as contended, with the ratio's interval where there are repeats,
instead of a bare ratio. One comparison here runs beside CPU burners on every core."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tokenrouter.cli import demo, main
from tokenrouter.evals import machine, run_record
from tokenrouter.evals.headline import headlines, ratio_interval
from tokenrouter.evals.html_report import write_html_report
from tokenrouter.evals.store import load_results

SIM = ["models=sim-r2r", "models.members.0.sim.latency_ms=1.0", "models.members.1.sim.latency_ms=4.0",
       "algorithm=bernoulli", "workload=synthetic", "workload.output_tokens=30"]


def quiet(**fields: object) -> dict:
    """A machine record of an idle machine, with `fields` changed."""
    return {"cores": 2, "load_before": 0.2, "load_after": 0.4, "others_cpu_share": 0.02, "steal_share": 0.0,
            "step_ms": {"large": {"measured": 24.0, "mean_batch": 2.0, "expected": 24.5,
                                  "source": "committed reference", "ratio": 0.98}}, **fields}


def test_contention_names_each_reason_and_nothing_on_a_quiet_machine() -> None:
    assert machine.contention(quiet()) == {}
    slow = quiet(step_ms={"large": {"measured": 172.0, "mean_batch": 1.0, "expected": 23.8,
                                    "source": "committed reference", "ratio": 7.2}})
    (text,) = machine.worst([machine.contention(slow)])
    assert text == "the large model's steps took 172 ms against 23.8 ms expected (committed reference), 7.2x"
    # the slowest model is judged: a 1 ms model's mean step is mostly host work and hand-off extends
    small = {"measured": 3.0, "mean_batch": 2.0, "expected": 1.0, "source": "committed reference", "ratio": 3.0}
    assert machine.contention(quiet(step_ms={**quiet()["step_ms"], "small": small})) == {}
    assert "51% of the machine's CPU time" in machine.worst([machine.contention(quiet(others_cpu_share=0.51))])[0]
    assert "steal" in machine.worst([machine.contention(quiet(steal_share=0.3))])[0]
    # the load average counts the run's own processes: judged only where the others' share is unknown
    assert machine.contention(quiet(load_before=5.0)) == {}
    assert machine.worst([machine.contention(quiet(load_before=5.0, others_cpu_share=None))]) == [
        "load average 5.0 on 2 cores"]
    # several runs: the worst per kind
    assert machine.worst([machine.contention(quiet(others_cpu_share=s)) for s in (0.3, 0.6, 0.4)]) == [
        "other processes used 60% of the machine's CPU time"]


def test_summary_validation_checks_the_machine_record() -> None:
    good = {"num_requests": 1, "throughput_tok_s": 2.0, "model_names": ["a"], "schema_version": 2,
            "config": {"seed": 0}, "config_hash": run_record.config_hash({"seed": 0})}
    assert run_record.validate({**good, "machine": quiet()}) is None
    for bad in (quiet(cores=0), quiet(others_cpu_share=1.5), quiet(load_before=-1), quiet(step_ms=[]),
                quiet(step_ms={"large": {"measured": "slow"}}), quiet(step_ms={"large": {"source": "a guess"}}), 7):
        assert "'machine'" in run_record.validate({**good, "machine": bad})


def test_step_times_against_each_kind_of_expectation() -> None:
    from tokenrouter.config import ModelSpec, SimSpec

    stats = {"models": {"small": {"steps": 10, "busy_s": 0.02, "mean_batch_size": 4.0},
                        "large": {"steps": 4, "busy_s": 0.4, "mean_batch_size": 1.0}}}
    sim = [ModelSpec(name="small", engine="sim", sim=SimSpec(latency_ms=2.0)),
           ModelSpec(name="large", engine="sim", sim=SimSpec(latency_ms=25.0))]
    steps = machine.step_times(stats, sim, "sim-r2r")
    assert steps["small"] == {"measured": 2.0, "mean_batch": 4.0, "expected": 2.0, "source": "sim step times",
                              "ratio": 1.0}
    assert steps["large"]["ratio"] == 4.0
    # a torch model of the committed reference's model set: its step times at the run's mean batch size
    reference = machine.reference_step_ms("tiny")
    assert set(reference) == {"small", "large"}
    torch_large = [ModelSpec(name="large", engine="torch", source="tiny:large")]
    (large,) = machine.step_times(stats, torch_large, "tiny").values()
    assert large["source"] == "committed reference" and large["expected"] == pytest.approx(reference["large"]["1"],
                                                                                         rel=1e-3)
    assert machine.step_times(stats, torch_large, "another-set")["large"]["expected"] is None
    # a start-up profile wins
    profile = {"decode_ms": {"1": 50.0, "8": 60.0}}
    (large,) = machine.step_times({**stats, "latency_profiles": {"large": profile}}, torch_large, "tiny").values()
    assert (large["source"], large["expected"], large["ratio"]) == ("start-up profile", 50.0, 2.0)
    # nested stats (query-level routing's systems, one per model)
    nested = {"models": {"large": {"system": "x", "models": {"large": {"steps": 2, "busy_s": 0.1}}}}}
    assert machine.measured_steps(nested, ["large"]) == {"large": (50.0, 1.0)}


def test_ratio_interval() -> None:
    assert ratio_interval([1.3]) is None
    low, high = ratio_interval([1.2, 1.3, 1.31])
    assert low < 1.2 < 1.31 < high and high / 1.27 == pytest.approx(1.27 / low, rel=0.02)  # symmetric in log


@contextmanager
def burners(count: int) -> Iterator[None]:
    """`count` CPU-bound processes that are not this process's descendants (a neighbour's, as the run sees
    them: started through a shell that exits, so they are re-parented), killed at the end."""
    pids = []
    try:
        for _ in range(count):
            out = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, check=True)
            pids.append(int(out.stdout.strip()))
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="CPU counters are read from Linux's /proc")
def test_a_comparison_beside_cpu_burners_says_it_is_contended(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    with burners(os.cpu_count() or 1):
        assert main(["bench", "-m", "system=tokenrouter,lockstep", *SIM, "concurrency=4", "workload.num_requests=12",
                     f"hydra.sweep.dir={sweep}"]) == 0
    for point in ("0", "1"):
        record = json.loads((sweep / point / "summary.json").read_text())["machine"]
        assert record["cores"] >= 1 and record["load_before"] is not None and record["load_after"] is not None
        assert record["others_cpu_share"] > machine.OTHERS_SHARE  # the burners' share of the CPU
        assert set(record["step_ms"]) == {"small", "large"}  # lock-step records its engine time too
        assert record["step_ms"]["large"]["source"] == "sim step times"
    page = write_html_report(load_results([sweep]), tmp_path).read_text()
    answer = page.split('<section id="answer">')[1].split("</section>")[0]
    assert 'class="card contended"' in answer and "Contended: other processes used" in answer


def test_the_report_command_prints_each_comparison_with_its_machine(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    _summaries(tmp_path / "runs", [(120.0, 100.0)], quiet(others_cpu_share=0.6))
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if "TokenRouter / lock-step R2R = 1.20x" in ln]
    assert "contended: other processes used 60% of the machine's CPU time" in line
    assert "timings" in (tmp_path / "out" / "table3.md").read_text()  # the table's column says it too


def _summaries(root: Path, ratios: list[tuple[float, float]], busy: dict, threshold: float = 0.5) -> None:
    """TokenRouter and lock-step runs of one configuration, one pair per seed, with a machine record."""
    for seed, (tr, ls) in enumerate(ratios):
        for system, tput in (("tokenrouter", tr), ("lockstep", ls)):
            cfg = {"system": {"name": system}, "algorithm": {"name": "r2r", "threshold": threshold},
                   "models": {"name": "tiny"}, "workload": {"name": "arith"}, "concurrency": 8, "seed": seed,
                   "runtime": {"thresholds": [1, 1]}}
            run = root / f"{system}-{seed}"
            run.mkdir(parents=True)
            run_record.write_summary(run, run_record.build({"model_names": ["small", "large"], "num_requests": 8,
                                                            "throughput_tok_s": tput, "accuracy": 0.75,
                                                            "machine": busy}, cfg))


def test_the_demo_and_the_report_say_a_comparison_was_contended(tmp_path: Path) -> None:
    slow = quiet(step_ms={"large": {"measured": 172.0, "mean_batch": 1.0, "expected": 23.8,
                                    "source": "committed reference", "ratio": 7.2}}, load_before=4.5)
    _summaries(tmp_path / "runs", [(120.0, 190.0), (130.0, 200.0), (125.0, 190.0)], slow)
    df = load_results([tmp_path / "runs"])
    (h,) = headlines(df)
    assert h.ratio == pytest.approx(125 / 193.33, rel=1e-3) and h.interval is not None and len(h.per_repeat) == 3
    assert h.contended == ["the large model's steps took 172 ms against 23.8 ms expected (committed reference), 7.2x"]
    assert "contended: the large model's steps" in h.sentence() and "95% interval" in h.sentence()
    # the demo: its own step-latency phase against the committed reference, and the runs' records
    from tokenrouter.evals import demo_summary as ds

    (r,) = ds.throughput_ratios(ds.lockstep_pairs(df))
    assert r["interval"] is not None and r["contended"] == h.contended
    figures = {"models": "tiny", "workload": "arith", "N": 8, "problems": 64, "repeats": 3, "accuracy": {},
               "step_ms": {"small": {"1": 9.0, "8": 10.0}, "large": {"1": 172.0, "8": 190.0}}, "routers": {},
               "lockstep": [r], "contended": h.contended, "frontier": {}, "phases": {"sweeps": 60.0}}
    reference = {"models": "tiny", "step_ms": {"small": {"1": 1.07, "8": 1.24}, "large": {"1": 23.84, "8": 30.0}}}
    note = demo.closing_note(figures, [], reference)
    head = note.split("\n- TokenRouter vs lock-step")[0]  # said before any ratio
    assert "**contended**: the large model's decode steps took 172.0 ms at batch 1 against the committed " \
           "reference's 23.8 ms (7.2x slower)" in head
    assert "**contended** while TokenRouter and lock-step were measured: the large model's steps took 172 ms" in head
    (line,) = [ln for ln in note.splitlines() if ln.startswith("- TokenRouter vs lock-step")]
    assert "= 0.65x (95% interval" in line and "over 3 repeats" in line and line.endswith(
        "-- contended, not a measure of the systems")
    assert "contended" not in demo.closing_note({**figures, "lockstep": [{**r, "contended": []}], "contended": []},
                                                [], None)


def test_the_demo_says_each_kind_of_contention_once_at_its_worst(tmp_path: Path) -> None:
    """Three comparisons on a busy machine: one line naming the busiest run's share, not one per comparison."""
    from tokenrouter.evals import demo_summary as ds

    for threshold, share in ((0.5, 0.5), (0.75, 0.52), (0.9, 0.51)):
        _summaries(tmp_path / "runs" / str(threshold), [(120.0, 100.0)], quiet(others_cpu_share=share), threshold)
    pairs = ds.lockstep_pairs(load_results([tmp_path / "runs"]))
    assert len(ds.throughput_ratios(pairs)) == 3
    (line,) = demo.machine_lines({"contended": machine.contended(pairs)}, None)
    assert "other processes used 52% of the machine's CPU time (summary.json" in line and line.count("%") == 1
