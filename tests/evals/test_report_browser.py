"""report.html in a real headless browser (the distribution's Chromium, driven by Playwright): a study of real
runs (the local tiny pair on arith, TokenRouter and lock-step traced, both single models, an open-loop rate
sweep on the sim pair) is reported, the page opened from disk with every network request refused, and it must
draw every section with no console error, the comparison's card on the first screen; hovering a Pareto point
shows its run. Screenshots of the first screen, the timelines and the coloured tokens are saved ($REPORT_SHOTS,
else the test's temporary directory). `make test-browser`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenrouter.cli import main

pytestmark = pytest.mark.browser

PAIR = ["models=tiny", "workload=arith", "workload.num_problems=16", "concurrency=4"]
RATE = ["+experiment=rate_sweep", "models=sim-r2r", "algorithm=bernoulli", "workload=synthetic",
        "workload.num_requests=12", "workload.output_tokens=40", "request_rate=2,6", "slo.ttft_ms=200",
        "slo.tpot_ms=40"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no Chromium on PATH (make test-browser installs the distribution's package)")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    study = tmp_path_factory.mktemp("study")
    assert main(["bench", "-m", "system=tokenrouter,lockstep", "algorithm=bernoulli", "algorithm.route_prob=0.15",
                 *PAIR, "runtime.trace=true", f"hydra.sweep.dir={study}/pair"]) == 0
    assert main(["bench", "-m", "system=single", "system.model=small,large", *PAIR,
                 f"hydra.sweep.dir={study}/single"]) == 0
    assert main(["bench", "-m", *RATE, f"hydra.sweep.dir={study}/rate"]) == 0
    assert main(["report", str(study), "--out", str(study / "report")]) == 0
    yield study / "report" / "report.html"


def test_the_report_opens_offline_without_errors_and_draws_every_section(report: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("REPORT_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    fetched: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

        def refuse(route) -> None:  # a self-contained page asks for nothing but itself
            if route.request.url != report.as_uri():
                fetched.append(route.request.url)
                route.abort()
            else:
                route.continue_()

        page.route("**/*", refuse)
        page.goto(report.as_uri())
        for section in ("answer", "pareto", "tables", "load", "timeline", "tokens", "runs"):
            assert page.locator(f"section#{section}").count() == 1, section
        # the page opens with the answer: the comparison's card is on the first screen
        card = page.locator("#answer .card")
        assert card.count() == 1 and "TokenRouter / lock-step R2R" in card.inner_text()
        assert card.bounding_box()["y"] + card.bounding_box()["height"] <= 900
        page.screenshot(path=str(shots / "report-first-screen.png"))
        assert page.locator("#pareto circle.pt").count() == 4  # both systems, both single models
        assert page.locator("#load svg.chart").count() == 4  # throughput, TTFT, TPOT, goodput
        assert page.locator("#timeline svg.timeline").count() == 2  # TokenRouter beside lock-step
        assert page.locator("#timeline rect.batch").count() > 20
        assert page.locator("#tokens span.tok.handoff").count() > 0
        assert page.locator("#tables table").count() >= 2  # Table 3 and the query-level table
        page.hover("#pareto circle.pt >> nth=-1")  # drawn last, so on top where two points coincide
        tip = page.locator("#tip")
        assert tip.is_visible() and "run: " in tip.inner_text()
        page.hover("#timeline rect.batch >> nth=3")
        assert "batch on" in tip.inner_text()
        page.mouse.move(0, 0)
        page.locator("#timeline").screenshot(path=str(shots / "report-timeline.png"))
        page.locator("#tokens").screenshot(path=str(shots / "report-tokens.png"))
        page.screenshot(path=str(shots / "report-full.png"), full_page=True)
        browser.close()
    assert errors == [] and fetched == []
    assert all((shots / f"report-{name}.png").stat().st_size > 10_000
               for name in ("first-screen", "timeline", "tokens", "full"))
