"""report.html from real runs on the sim pair (TokenRouter and lock-step traced, an open-loop rate sweep): one
self-contained file (nothing fetched: no external script, style, image or font), the sections the runs support,
the timeline of one TokenRouter run beside the lock-step run of the same setting, the load curves' four panels,
and every run's details. `make test-browser` opens the same kind of page in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evals.html_report import timeline_pair, write_html_report
from evals.store import load_results
from tokenrouter.cli import main

FAST = ["models=sim-r2r", "models.members.0.sim.latency_ms=1.0", "models.members.1.sim.latency_ms=3.0",
        "algorithm=bernoulli", "workload=synthetic", "workload.num_requests=8", "workload.output_tokens=20"]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study")
    assert main(["bench", "-m", "system=tokenrouter,lockstep", *FAST, "concurrency=4", "runtime.trace=true",
                 f"hydra.sweep.dir={out}/pair"]) == 0
    assert main(["bench", "-m", "+experiment=rate_sweep", *FAST, "request_rate=20,60", "slo.ttft_ms=50",
                 f"hydra.sweep.dir={out}/rate"]) == 0
    return out


def test_the_page_is_self_contained_and_draws_what_the_runs_hold(study: Path, tmp_path: Path) -> None:
    assert main(["report", str(study), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)  # nothing to fetch
    assert "url(" not in page and "@import" not in page
    sections = re.findall(r'<section id="(\w+)">', page)
    assert sections == ["tables", "load", "timeline", "tokens", "runs"]  # no graded workload: no Pareto plot
    load = page.split('<section id="load">')[1].split("</section>")[0]
    assert load.count('<svg class="chart"') == 4 and "goodput" in load
    timeline = page.split('<section id="timeline">')[1].split("</section>")[0]
    assert timeline.count('<svg class="timeline"') == 2 and "tokenrouter (bernoulli)" in timeline
    assert "lockstep (bernoulli)" in timeline and "busy" in timeline
    assert page.count('class="tok m') == 4 * 20 and "handoff" in page  # 4 samples of 20 tokens
    assert page.count("<details>") == 6  # every run: 2 traced + 4 rate-sweep points


def test_the_timeline_pairs_runs_of_the_same_setting(study: Path) -> None:
    df = load_results([study])
    a, b = timeline_pair(df)
    assert a is not None and b is not None
    assert (a["system"], b["system"]) == ("tokenrouter", "lockstep") and a["concurrency"] == b["concurrency"] == 4


def test_untraced_runs_get_a_note_instead_of_a_timeline(study: Path, tmp_path: Path) -> None:
    df = load_results([study / "rate"])
    page = write_html_report(df, tmp_path).read_text()
    assert "rerun with <code>runtime.trace=true</code>" in page and '<section id="tokens">' not in page
