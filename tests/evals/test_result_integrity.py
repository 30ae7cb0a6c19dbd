"""Results are never mislabelled, reports never crash on a normal or damaged sweep, and storage faults are one
line each (issue 31). Real sweeps on the sim pair through the CLI; disk-full and read-only run dirs on small
tmpfs mounts where this process may mount one (root, as on CI), with a monkeypatched fault where it cannot."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tokenrouter.cli import main
from tokenrouter.errors import StorageError
from tokenrouter.evals import bench, run_record
from tokenrouter.evals.store import find_run_dirs, load_results
from tokenrouter.fsutil import atomic_write_text, locked_dir
from tokenrouter.runtime.thresholds import infeasible_note

SIM = ["models=sim-r2r", "algorithm=bernoulli", "workload=synthetic"]
SMALL = [*SIM, "system=lockstep", "workload.num_requests=4", "workload.output_tokens=12"]


def bench_main(*args: str) -> int:
    return main(["bench", *args])


def err_lines(capsys: pytest.CaptureFixture) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if "[HYDRA]" not in ln and "][INFO]" not in ln]


# -- 1. a report over a sweep of every shipped system that runs on the sim pair ----------------------------------


@pytest.fixture(scope="module")
def every_system(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's repro (tokenrouter + lock-step, two routing rates: "auto" next to numeric thresholds), with
    Std. Serving and query-level routing in the same grid, and both single models beside it. official_r2r
    and the *_sglang systems need GPUs / SGLang servers (tests/baselines)."""
    root = tmp_path_factory.mktemp("every_system")
    common = [*SIM, "concurrency=4", "workload.num_requests=8", "workload.output_tokens=16"]
    assert bench_main("-m", "system=tokenrouter,lockstep,std_serving,query_routing", "algorithm.route_prob=0.2,0.35",
                      *common, f"hydra.sweep.dir={root / 'grid'}") == 0
    assert bench_main("-m", "system=single", "+system.model=small,large", *common,
                      f"hydra.sweep.dir={root / 'single'}") == 0
    return root


def test_report_over_every_shipped_system(every_system: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert main(["report", str(every_system), "--out", str(out)]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["system"].value_counts().items()) == [
        ("lockstep", 2), ("query_routing", 2), ("single", 2), ("std_serving", 2), ("tokenrouter", 2)]
    for name in ("table3", "systems"):
        assert (out / f"{name}.csv").is_file(), name
    # each routing rate planned its own thresholds: two configurations of one threshold each, not one threshold
    # axis (which the old grouping by N made of them); the report says so instead of drawing it
    assert not (out / "threshold_validation.csv").exists()
    notes = pd.read_csv(out / "left_out.csv").set_index("report")
    assert notes.loc["threshold_validation", "runs"] == 2 and "one threshold only" in notes.loc["threshold_validation", "why"]
    assert len(pd.read_csv(out / "table3.csv")) == 2  # one row per routing rate, labelled with it
    assert list(pd.read_csv(out / "table3.csv")["algorithm.route_prob"]) == [0.2, 0.35]
    # one type per column: lock-step ran without thresholds (missing), TokenRouter with resolved numbers
    table = load_results([every_system])
    assert str(table["threshold_large"].dtype) == "float64" and str(table["thresholds"].dtype) == "string"
    lockstep = table[table["system"] == "lockstep"]
    assert lockstep["thresholds"].isna().all() and (lockstep["thresholds_spec"] == "auto").all()
    tokenrouter = table[table["system"] == "tokenrouter"]
    assert tokenrouter["threshold_large"].notna().all() and tokenrouter["thresholds"].str.startswith("[").all()


# -- 2. a rerun with one value changed never relabels old metrics ------------------------------------------------


def test_changed_config_is_refused_then_rerun_supersedes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = [*SMALL, "concurrency=1,2", f"hydra.sweep.dir={tmp_path}"]
    assert bench_main("-m", *sweep) == 0
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/summary.json")}
    capsys.readouterr()
    assert bench_main("-m", *sweep, "workload.output_tokens=24") == 2
    lines = [ln for ln in err_lines(capsys) if "holds results of another config" in ln]
    assert len(lines) == 2 and all("workload.output_tokens: 12 -> 24" in ln and "resume=rerun" in ln for ln in lines)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/summary.json")} == mtimes  # nothing touched
    table = pd.read_csv(tmp_path / "results.csv")  # the requested points failed; old results are not theirs
    assert list(table["status"]) == ["failed", "failed"] and table["mean_output_tokens"].isna().all()

    assert bench_main("-m", *sweep, "workload.output_tokens=24", "resume=rerun") == 0
    table = pd.read_csv(tmp_path / "results.csv")
    assert list(table["cfg.workload.output_tokens"]) == [24, 24] and list(table["mean_output_tokens"]) == [24, 24]
    kept = sorted(tmp_path.glob("*/.superseded/*/summary.json"))
    assert len(kept) == 2 and all(json.loads(p.read_text())["config"]["workload"]["output_tokens"] == 12 for p in kept)
    assert len(find_run_dirs([tmp_path])) == 2  # superseded results are kept, never counted as runs
    # the same command again: every point is done and is skipped
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/summary.json")}
    assert bench_main("-m", *sweep, "workload.output_tokens=24") == 0
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/summary.json")} == mtimes


def test_how_to_run_a_sweep_is_not_part_of_a_points_identity() -> None:
    config = {"concurrency": 4, "workload": {"output_tokens": 12}, "resume": "check", "objective": None}
    same = {**config, "resume": "rerun", "objective": ["accuracy"]}
    assert run_record.config_hash(config) == run_record.config_hash(same)
    assert run_record.config_hash(config) != run_record.config_hash({**config, "concurrency": 8})
    assert run_record.config_differences(config, {**config, "concurrency": 8}) == "concurrency: 4 -> 8"


# -- 3. a single run aimed at a sweep point: Hydra's copy of the config is written under the point's lock only --


HOLDER = """
import sys, time
from tokenrouter.fsutil import locked_dir
with locked_dir(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_point_held_by_another_run_keeps_its_config(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    point = tmp_path / "0"
    assert bench_main(*SMALL, "concurrency=1", f"hydra.run.dir={point}") == 0  # the single run, finished
    hydra_config = (point / ".hydra" / "config.yaml").read_text()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(point)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"  # as if still running
        capsys.readouterr()
        assert bench_main("-m", *SMALL, "concurrency=2", f"hydra.sweep.dir={tmp_path}") == 2
        assert any("is in use by another run" in ln for ln in err_lines(capsys))
        assert (point / ".hydra" / "config.yaml").read_text() == hydra_config  # the sweep wrote nothing there
    finally:
        holder.kill()
        holder.wait()
    # the sweep again, the single run done: its results are refused, never relabelled with the sweep's settings
    assert bench_main("-m", *SMALL, "concurrency=2", f"hydra.sweep.dir={tmp_path}") == 2
    assert any("concurrency: 1 -> 2" in ln for ln in err_lines(capsys))
    table = pd.read_csv(tmp_path / "results.csv")  # the requested point failed: its row says so, not the old run
    assert list(table["status"]) == ["failed"] and "concurrency: 1 -> 2" in table["error"][0]


def test_single_run_into_a_finished_point_keeps_its_results(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # the repro: a sweep, then a single run of another value aimed at one of its points
    assert bench_main("-m", *SMALL, "algorithm.route_prob=0.2,0.5", f"hydra.sweep.dir={tmp_path}") == 0
    before = (tmp_path / "1" / "summary.json").read_bytes()
    capsys.readouterr()
    assert bench_main(*SMALL, "algorithm.route_prob=0.9", f"hydra.run.dir={tmp_path / '1'}") == 2
    lines = err_lines(capsys)
    assert len(lines) == 1 and "algorithm.route_prob: 0.5 -> 0.9" in lines[0] and "hydra.run.dir" in lines[0]
    assert (tmp_path / "1" / "summary.json").read_bytes() == before  # untouched
    # resume=rerun moves them aside; the same config again measures again, the earlier results kept too
    assert bench_main(*SMALL, "algorithm.route_prob=0.9", "resume=rerun", f"hydra.run.dir={tmp_path / '1'}") == 0
    assert bench_main(*SMALL, "algorithm.route_prob=0.9", f"hydra.run.dir={tmp_path / '1'}") == 0
    kept = sorted(tmp_path.glob("1/.superseded/*/summary.json"))
    assert [json.loads(p.read_text())["config"]["algorithm"]["route_prob"] for p in kept] == [0.5, 0.9]


def test_results_csv_has_a_row_and_a_status_per_point(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert bench_main("-m", *SMALL, "concurrency=1,2", f"hydra.sweep.dir={tmp_path}") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("2 ok, 0 skipped (finished earlier), 0 failed")
    # point 1 holds concurrency 2's results; the sweep now asks it for 3: refused, so it fails this time
    assert bench_main("-m", *SMALL, "concurrency=1,3", f"hydra.sweep.dir={tmp_path}") == 2
    assert capsys.readouterr().out.splitlines()[-1].startswith("0 ok, 1 skipped (finished earlier), 1 failed")
    table = pd.read_csv(tmp_path / "results.csv").set_index("run_dir")
    assert table.loc[str(tmp_path / "0"), "status"] == "ok"
    assert table.loc[str(tmp_path / "1"), "status"] == "failed"
    assert "concurrency: 2 -> 3" in table.loc[str(tmp_path / "1"), "error"]


# -- 4. damaged summaries: skipped by reports with one warning each, rerun by a sweep ---------------------------


DAMAGE = {"truncated": b'{"num_requests": 4, "throu', "list": b"[]", "latin1": b"\xff\xfe{}", "empty_object": b"{}"}


def test_report_skips_damaged_summaries(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = tmp_path / "sweep"
    assert bench_main("-m", *SMALL, "concurrency=1,2,3,4,5", f"hydra.sweep.dir={sweep}") == 0
    for point, content in zip(("0", "1", "2", "3"), DAMAGE.values(), strict=True):
        (sweep / point / "summary.json").write_bytes(content)
    capsys.readouterr()
    out = tmp_path / "report"
    assert main(["report", str(sweep), "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "Traceback" not in "\n".join(err)
    warnings = [ln for ln in err if ln.startswith("warning: skipping")]
    assert len(warnings) == 4 and all(any(f"/{p}/summary.json" in w for w in warnings) for p in "0123")
    assert list(pd.read_csv(out / "runs.csv")["concurrency"]) == [5]
    assert bench_main("-m", *SMALL, "concurrency=1,2,3,4,5", f"hydra.sweep.dir={sweep}") == 0  # rerun, not done
    assert sorted(pd.read_csv(sweep / "results.csv")["concurrency"]) == [1, 2, 3, 4, 5]


def _edit_summary(path: Path, **fields: object) -> None:
    """Change summary fields the config hash does not cover (the config record itself stays consistent)."""
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(("fields", "problem"), [
    ({"concurrency": "four"}, "'concurrency' is \"four\", expected an integer >= 1"),
    ({"system": 7}, "'system' is 7 but its config says \"lockstep\""),
    ({"throughput_tok_s": -1.0}, "'throughput_tok_s' is -1.0"),
    ({"token_share": {"small": 3}}, "'token_share'"),
])
def test_a_bad_summary_field_damages_that_run_only(fields: dict, problem: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    sweep = tmp_path / "sweep"
    assert bench_main("-m", *SMALL, "concurrency=1,2", f"hydra.sweep.dir={sweep}") == 0
    _edit_summary(sweep / "0" / "summary.json", **fields)
    capsys.readouterr()
    assert main(["report", str(sweep), "--out", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning: skipping")]
    assert len(warnings) == 1 and str(sweep / "0" / "summary.json") in warnings[0] and problem in warnings[0]
    assert list(pd.read_csv(tmp_path / "report" / "runs.csv")["concurrency"]) == [2]
    assert bench_main("-m", *SMALL, "concurrency=1,2", f"hydra.sweep.dir={sweep}") == 0  # rerun, then collected
    assert sorted(pd.read_csv(sweep / "results.csv")["concurrency"]) == [1, 2]


def test_report_on_single_model_runs_only(tmp_path: Path) -> None:
    assert bench_main("-m", *SIM, "system=single", "+system.model=small,large", "workload.num_requests=2",
                      "workload.output_tokens=4", f"hydra.sweep.dir={tmp_path / 'single'}") == 0
    assert main(["report", str(tmp_path / "single"), "--out", str(tmp_path / "report")]) == 0
    assert sorted(pd.read_csv(tmp_path / "report" / "runs.csv")["system_model"]) == ["large", "small"]


def test_summary_validation_names_the_problem() -> None:
    good = {"num_requests": 1, "throughput_tok_s": 2.0, "model_names": ["a"], "schema_version": 2,
            "config": {"seed": 0}, "config_hash": run_record.config_hash({"seed": 0})}
    assert run_record.validate(good) is None
    assert "no config record" in run_record.validate({})
    assert "not a JSON object" in run_record.validate([])
    assert "num_requests" in run_record.validate({**good, "num_requests": True})
    assert "does not match its config_hash" in run_record.validate({**good, "config": {"seed": 1}})


# -- 5. storage faults: one line naming the path and the errno; in a sweep only that point fails ----------------


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    """tmpfs mounts made by the test, unmounted after it (skips when this process may not mount)."""
    made: list[Path] = []
    yield made
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], check=False)


def mount_tmpfs(mounts: list[Path], path: Path, size: str, read_only: bool = False) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the monkeypatched tests below cover the logic)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    mounts.append(path)
    if read_only:
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


# ~100 KB of requests.jsonl in a few seconds (32 requests of 100 tokens, batched): more than a 64 KiB tmpfs holds
FILLS_64K = [*SIM, "system=lockstep", "workload.num_requests=32", "workload.output_tokens=100"]


def test_disk_full_run_is_one_line(tmp_path: Path, mounts: list[Path], capsys: pytest.CaptureFixture) -> None:
    run_dir = tmp_path / "full"
    mount_tmpfs(mounts, run_dir, "64k")
    capsys.readouterr()
    code = bench_main(*FILLS_64K, "concurrency=16", f"hydra.run.dir={run_dir}")
    lines = err_lines(capsys)
    assert code == 1 and len(lines) == 1, lines
    assert str(run_dir) in lines[0] and "No space left on device (ENOSPC)" in lines[0]


def test_sweep_goes_on_past_full_and_read_only_points(tmp_path: Path, mounts: list[Path],
                                                      capsys: pytest.CaptureFixture) -> None:
    mount_tmpfs(mounts, tmp_path / "1", "64k")
    mount_tmpfs(mounts, tmp_path / "2", "1m", read_only=True)
    capsys.readouterr()
    # points 0 and 3 are small runs on the normal disk; 1 fills its 64 KiB tmpfs, 2 is read-only
    code = bench_main("-m", *FILLS_64K, "concurrency=16", "workload.num_requests=4,32,33,5",
                      f"hydra.sweep.dir={tmp_path}")
    lines = [ln for ln in err_lines(capsys) if ln.startswith("tokenrouter bench:")]
    assert code == 1
    assert len(lines) == 2 and "(ENOSPC)" in lines[0] and "(EROFS)" in lines[1] and "Traceback" not in str(lines)
    table = pd.read_csv(tmp_path / "results.csv")
    assert sorted(table[table["status"] == "ok"]["num_requests"]) == [4, 5]
    failed = table[table["status"] == "failed"]
    assert sorted(Path(d).name for d in failed["run_dir"]) == ["1", "2"]
    assert failed["error"].str.contains("cannot write").all()


def test_read_only_single_run_dir_is_one_line(tmp_path: Path, mounts: list[Path],
                                              capsys: pytest.CaptureFixture) -> None:
    mount_tmpfs(mounts, tmp_path / "ro", "1m", read_only=True)
    capsys.readouterr()
    assert bench_main(*SMALL, f"hydra.run.dir={tmp_path / 'ro'}") == 1
    lines = err_lines(capsys)
    assert len(lines) == 1 and str(tmp_path / "ro") in lines[0] and "(EROFS)" in lines[0], lines


def test_results_table_on_a_full_disk_is_one_line_and_written_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    from tokenrouter.cli import bench as bench_cli

    real = bench_cli.atomic_write_text

    def full(path: Path, text: str) -> None:
        raise StorageError(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    monkeypatch.setattr(bench_cli, "atomic_write_text", full)
    capsys.readouterr()
    assert bench_main("-m", *SMALL, "concurrency=1,2", f"hydra.sweep.dir={tmp_path}") == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and not (tmp_path / "results.csv").exists()
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("tokenrouter bench:")]
    assert len(lines) == 1 and "2 ok" in lines[0] and "results.csv" in lines[0] and "(ENOSPC)" in lines[0]
    assert str(tmp_path / "1") in captured.out  # each point's line is printed all the same
    monkeypatch.setattr(bench_cli, "atomic_write_text", real)  # space again: the same command writes the table
    assert bench_main("-m", *SMALL, "concurrency=1,2", f"hydra.sweep.dir={tmp_path}") == 0
    assert sorted(pd.read_csv(tmp_path / "results.csv")["concurrency"]) == [1, 2]


def test_report_into_a_read_only_dir_is_one_line(tmp_path: Path, mounts: list[Path],
                                                 capsys: pytest.CaptureFixture) -> None:
    assert bench_main(*SMALL, f"hydra.run.dir={tmp_path / 'run'}") == 0
    mount_tmpfs(mounts, tmp_path / "ro", "1m", read_only=True)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "ro" / "report")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "ro") in lines[0] and "(EROFS)" in lines[0], lines


def test_full_disk_while_writing_requests_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """Where no tmpfs can be mounted: the requests file's writes raise ENOSPC after a few lines."""
    real_write = bench.ResultLog.write
    written = []

    def write(self: bench.ResultLog, row: dict) -> None:
        if len(written) == 3:
            self._fh.write = _raise_enospc  # type: ignore[union-attr, method-assign]
        written.append(row)
        real_write(self, row)

    monkeypatch.setattr(bench.ResultLog, "write", write)
    capsys.readouterr()
    assert bench_main(*SMALL, "workload.num_requests=40", f"hydra.run.dir={tmp_path}") == 1
    lines = err_lines(capsys)
    assert len(lines) == 1 and f"cannot write {tmp_path / 'requests.jsonl'}" in lines[0] and "(ENOSPC)" in lines[0]
    assert len(written) < 40 and not (tmp_path / "summary.json").exists()  # no new requests after the fault


def _raise_enospc(*_: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_storage_faults_name_path_and_errno(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", _raise_enospc)
    with pytest.raises(StorageError, match=r"cannot write .*summary.json: No space left on device \(ENOSPC\)"):
        atomic_write_text(tmp_path / "summary.json", "{}")
    assert list(tmp_path.iterdir()) == []  # no temp file left behind
    monkeypatch.undo()

    def denied(*_: object, **__: object) -> int:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "run" / ".tokenrouter.lock"))

    (tmp_path / "run").mkdir()
    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(StorageError, match=r"\.tokenrouter\.lock: Permission denied \(EACCES\)"):
        with locked_dir(tmp_path / "run"):
            pass


# -- 6. result files follow the umask -----------------------------------------------------------------------------


def test_result_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        assert bench_main("-m", *SMALL, f"hydra.sweep.dir={tmp_path}") == 0
    finally:
        os.umask(old)
    for path in ("0/summary.json", "0/config.yaml", "0/requests.jsonl", "0/.hydra/config.yaml", "results.csv"):
        assert (tmp_path / path).stat().st_mode & 0o777 == 0o644, path


# -- 7. infeasible thresholds are lowered with one warning line -------------------------------------------------


def test_infeasible_thresholds_warn(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    assert bench_main(*SIM, "system=tokenrouter", "workload.num_requests=4", "workload.output_tokens=8",
                      "concurrency=4", "runtime.thresholds=[100,100]", f"hydra.run.dir={tmp_path}") == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    note = infeasible_note([100, 100], summary["thresholds"], 4)
    assert note is not None and sum(b - 1 for b in summary["thresholds"]) < 4
    assert [ln for ln in capsys.readouterr().err.splitlines() if "infeasible" in ln][0].endswith(note)
    assert infeasible_note([1, 2], [1, 2], 4) is None and infeasible_note("auto", [1, 3], 4) is None
    assert infeasible_note([[1, 1], [1, 5]], [1, 2], 2) == (
        "runtime.thresholds [1, 5] are infeasible at N=2 (delayed batching needs sum(B_i - 1) < N): lowered to [1, 2]")
