"""report.html from real runs on the sim pair (TokenRouter and lock-step traced, an open-loop rate sweep): one
self-contained file (nothing fetched: no external script, style, image or font), the sections the runs support,
the timeline of one TokenRouter run beside the lock-step run of the same setting, the load curves' four panels,
and every run's details. `make test-browser` opens the same kind of page in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenrouter.cli import main
from tokenrouter.evals.html_report import timeline_pair, write_html_report
from tokenrouter.evals.store import load_results

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
    # the answer first (a card per comparison), then tables, then plots; no graded workload: no Pareto plot
    assert sections == ["answer", "tables", "load", "timeline", "tokens", "runs"]
    answer = page.split('<section id="answer">')[1].split("</section>")[0]
    assert len(re.findall(r'<div class="card( contended)?">', answer)) == 1
    assert "TokenRouter / lock-step R2R throughput" in answer
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


def _run(root: Path, name: str, summary: dict, **cfg: object) -> None:
    """A run dir as bench leaves it (the summary with its config record)."""
    from tokenrouter.evals.run_record import build, write_summary

    config = {"system": {"name": "tokenrouter"}, "algorithm": {"name": "r2r", "threshold": 0.5},
              "models": {"name": "qwen3-0.6b-8b", "members": [{"name": "small", "source": "Qwen/Qwen3-0.6B"},
                                                              {"name": "large", "source": "Qwen/Qwen3-8B"}]},
              "workload": {"name": "amc23"}, "concurrency": 4, "seed": 0,
              "runtime": {"thresholds": "auto", "delayed_batching": True}}
    for key, value in cfg.items():
        node, *path = key.split(".")
        target = config
        for part in [node, *path][:-1]:
            target = target.setdefault(part, {})
        target[[node, *path][-1]] = value
    (root / name).mkdir(parents=True)
    write_summary(root / name, build({"model_names": ["small", "large"], "num_requests": 8, **summary}, config))


def test_the_page_opens_with_the_answer(tmp_path: Path) -> None:
    """A card per comparison: TokenRouter over lock-step with the ratio's interval over repeats, the accuracy of
    both, the paper's Table 3 figure for this pair at N=4; then tables without all-empty columns; then plots,
    each series' line in the order of its swept value; a single-model run named with its model; no `<NA>`."""
    runs = tmp_path / "runs"
    for seed, (tr, ls) in enumerate(((300.0, 100.0), (330.0, 100.0), (315.0, 105.0))):
        _run(runs, f"tr{seed}", {"throughput_tok_s": tr, "accuracy": 0.62}, seed=seed)
        _run(runs, f"ls{seed}", {"throughput_tok_s": ls, "accuracy": 0.60}, seed=seed,
             **{"system.name": "lockstep"})
    # a Pareto series whose accuracy does not fall with throughput: joined in threshold order
    for threshold, speed, acc in ((0.3, 280.0, 0.55), (0.7, 200.0, 0.50), (0.9, 240.0, 0.65)):
        _run(runs, f"sweep{threshold}", {"throughput_tok_s": speed, "accuracy": acc}, concurrency=8,
             **{"algorithm.threshold": threshold})
    _run(runs, "large", {"throughput_tok_s": 90.0, "accuracy": 0.7}, concurrency=8,
         **{"system.name": "single", "system.model": "large"})
    out = tmp_path / "out"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert re.findall(r'<section id="(\w+)">', page)[:3] == ["answer", "tables", "pareto"]
    answer = page.split('<section id="answer">')[1].split("</section>")[0]
    (card,) = re.findall(r'<div class="card">(.*?)</div></div>', answer)
    assert "pair 0.6B/8B · amc23 · r2r · threshold=0.5 · N=4" in card
    assert '<div class="ratio">3.10x</div>' in card  # 315 / 101.7
    assert re.search(r"95% interval \d\.\d\d-\d\.\d\dx over 3 repeats", card)
    assert "accuracy 62.0% vs 60.0% (+2.0 points)" in card and "paper (Table 3, GPUs): 3.21x" in card
    assert "contended" not in answer.lower()  # no machine record says otherwise
    tables = page.split('<section id="tables">')[1].split("</section>")[0]
    for table in re.findall(r"<table>(.*?)</table>", tables):
        head = re.findall(r"<th>(.*?)</th>", table)
        body = re.findall(r"<tbody>(.*)</tbody>", table)[0]
        rows = [re.findall(r"<td>(.*?)</td>", row) for row in body.split("<tr>")[1:]]
        assert rows and all(any(row[i] != "--" for row in rows) for i in range(len(head))), head
    assert "R2R official tok/s" not in tables  # no official run: an empty column, left out
    pareto = page.split('<section id="pareto">')[1].split("</section>")[0]
    line = re.search(r'<polyline points="([^"]+)" fill="none" stroke="([^"]+)"', pareto)
    xs = [float(p.split(",")[0]) for p in line.group(1).split()]
    assert len(xs) == 3 and xs[0] > xs[2] > xs[1]  # thresholds 0.3, 0.7, 0.9: throughput 280, 200, 240
    runs_table = page.split('<section id="runs">')[1]
    assert "<td>single (large: Qwen/Qwen3-8B)</td>" in runs_table and "&lt;NA&gt;" not in page


def test_the_ablation_keeps_the_papers_gpu_figures_apart_from_another_pairs(tmp_path: Path) -> None:
    from tokenrouter.evals.report import ablation

    runs = tmp_path / "runs"
    for n in (1, 4):
        _run(runs, f"full{n}", {"throughput_tok_s": 30.0 * n}, concurrency=n, **{"models.name": "sim-r2r"})
        _run(runs, f"lock{n}", {"throughput_tok_s": 20.0 * n}, concurrency=n,
             **{"models.name": "sim-r2r", "system.name": "lockstep"})
    ablation(load_results([runs]), tmp_path)
    text = (tmp_path / "ablation.md").read_text()
    assert "paper" not in text.split("\n\n", 1)[1]  # no paper column beside the sim pair's rows
    assert "pair sim-r2r" in text and "not set beside these" in text
