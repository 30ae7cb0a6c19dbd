"""What a user types from the docs runs: the README's quickstart block, line by line, as a shell would run it
(`tokenrouter` on PATH, a fresh working directory; the server's port replaced by a free one). Each executed
command is printed (pytest -s shows the list)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_blocks import blocks, first_shell_block, run_page, section, user_env

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_readme_quickstart_runs(tmp_path: Path) -> None:
    """The README's quickstart pasted whole into a shell (one bash script; the port a free one): the server
    answers in the pair's format with the page's expected output, is stopped by the block itself, and the
    sweep, summary and report land."""
    lines = first_shell_block(section(ROOT / "README.md", "Quickstart"))
    site_page = first_shell_block((ROOT / "docs" / "quickstart.md").read_text())
    assert site_page[0].startswith("python3 -m venv") and site_page[1:] == lines  # the site's page: the same lines
    port = str(free_port())
    script = tmp_path / "quickstart.sh"
    script.write_text("\n".join(line.replace("8000", port) for line in lines) + "\n")
    print(script.read_text())
    shell = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=user_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = shell.communicate(timeout=600)
        assert shell.returncode == 0, err[-3000:]
        reply = json.loads(next(ln for ln in out.splitlines() if ln.startswith('{"id"')))
        content = reply["choices"][0]["message"]["content"]
        shown = re.search(r'"content": "(.*?)"\s+\.\.\.\s+"tokens_per_model": (\{.*\})',
                          section(ROOT / "README.md", "Quickstart"))
        assert shown and json.loads(f'"{shown.group(1)}"') == content  # the page's expected output
        assert reply["usage"]["tokens_per_model"] == json.loads(shown.group(2))
        with socket.socket() as s:  # the block stopped its server: the port is free again
            s.bind(("127.0.0.1", int(port)))
    finally:  # whatever the block left running (nothing, when it works)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    assert (tmp_path / "runs" / "quickstart" / "results.csv").is_file()
    assert (tmp_path / "runs" / "quickstart" / "report" / "systems.md").is_file()
    assert (tmp_path / "runs" / "quickstart" / "report" / "report.html").is_file()
    assert (tmp_path / "runs" / "quickstart" / "0" / "trace.json").is_file()


INTERNAL = re.compile(r"\bissues? \d+|\bsessions? \d+|this machine's disk|shared/PAPER|lent to the", re.I)


def test_user_facing_text_has_no_internal_words() -> None:
    """The docs, the README, the Makefile and the code's messages and docstrings speak to users: no tracker
    numbers ("issue 32"), no working-session labels, no paths of the place the project was written in."""
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]
    for package in ("tokenrouter", "benchmarks", "conf"):
        files += sorted(p for p in (ROOT / package).rglob("*") if p.suffix in (".py", ".md", ".yaml"))
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}" for path in files
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if INTERNAL.search(line)]
    assert not found, found


PAGE_COLUMNS = 90  # what a docs page's code block shows without scrolling (the site's theme, a 1280 px window)


def test_quickstart_lines_fit_the_page() -> None:
    """The quickstart's commands and expected output, on the site and in the README, are wrapped so that no line
    is cut off at the code block's edge (long commands continue with a backslash), and the page shows the
    output to expect."""
    for text in ((ROOT / "docs" / "quickstart.md").read_text(), section(ROOT / "README.md", "Quickstart")):
        found = blocks(text)
        assert [language for language, _ in found][:3] == ["sh", "text", "text"]  # commands, then their output
        long = [line for _, body in found for line in body.splitlines() if len(line) > PAGE_COLUMNS]
        assert not long, long


def test_see_a_run_commands_run(tmp_path: Path) -> None:
    """docs/see_a_run.md: trace two runs, summarize them, report them."""
    ran = run_page(section(ROOT / "docs" / "see_a_run.md", "Commands"), tmp_path)
    assert len(ran) == 4 and (tmp_path / "runs" / "traced" / "report" / "report.html").is_file()
    summary = ran["tokenrouter trace summarize runs/traced/0 runs/traced/1"]
    assert "(tokenrouter)" in summary and "(lockstep)" in summary


def test_add_a_workload_page_runs(tmp_path: Path) -> None:
    """docs/add_a_workload.md, every block in order: a data file and its config in a config dir of the user's,
    a loader of the user's own in the working directory, each run through `bench --config-dir`."""
    ran = run_page((ROOT / "docs" / "add_a_workload.md").read_text(), tmp_path)
    assert sum(line.startswith("tokenrouter bench --config-dir my_conf") for line in ran) == 2
    mine = json.loads((tmp_path / "runs" / "my_math" / "summary.json").read_text())
    assert mine["num_requests"] == 2 and mine["workload"] == "my_math" and mine["accuracy"] is not None
    rows = [json.loads(ln) for ln in (tmp_path / "runs" / "my_math" / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["gold"] for r in rows) == ["42", "5"]
    doubling = json.loads((tmp_path / "runs" / "doubling" / "summary.json").read_text())
    assert doubling["num_requests"] == 4 and doubling["workload"] == "doubling"


def test_reproduce_plan_command_runs(tmp_path: Path) -> None:
    """docs/reproduce.md section 2 (offline): the plan of the Table 3 sweep on 8 x 80 GiB GPUs, as the page's
    memory column quotes it."""
    ran = run_page(section(ROOT / "docs" / "reproduce.md", "2. Check the plan, from anywhere"), tmp_path)
    plan = ran.pop("tokenrouter plan -m +experiment=table3 --gpus 8 --gpu-memory-gib 80")
    assert not ran and "8 job(s)" in plan and "cuda:0: 76.0 of 80.0 GiB planned" in plan
    assert "30.51 GiB" in plan  # the 32B model's weights per GPU at TP 2


def test_a_misspelt_field_role_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "my_conf" / "workload").mkdir(parents=True)
    (tmp_path / "d.jsonl").write_text('{"q": "1+1?", "a": "2"}\n')
    (tmp_path / "my_conf" / "workload" / "w.yaml").write_text(
        "name: w\nloader: math\npath: d.jsonl\nfields: {problem: q, answer: a}\nmax_new_tokens: 4\n")
    done = subprocess.run("tokenrouter bench --config-dir my_conf models=sim-r2r workload=w", shell=True,
                          cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "workload w: unknown workload.fields role(s) ['problem']; this loader's roles: ['answer', 'question']" \
        in done.stderr


def test_docs_links_resolve() -> None:
    """Every relative link in README.md and the docs' pages (generated ones too) names a file that exists (a moved
    page breaks the test)."""
    broken = []
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "examples" not in p.relative_to(ROOT / "docs").parts]
    for page in [ROOT / "README.md", *pages]:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_reference_pages_are_generated_from_the_code() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_reference.py"), "--check"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    config = (ROOT / "docs" / "reference" / "config.md").read_text()
    empty = [ln for ln in config.splitlines() if ln.startswith("| `") and ln.rstrip().endswith("|  |")]
    assert not empty, f"config keys without a meaning: {empty}"  # a field needs a comment beside or above it
    assert "\\|" not in config and "### `algorithm=r2r`" in config and "### `workload=amc23`" in config
    # summary.json's fields, from RunRecord (tokenrouter/evals/run_record.py): each with a type and a meaning
    results = (ROOT / "docs" / "reference" / "results.md").read_text()
    rows = [ln for ln in results.splitlines() if ln.startswith("| `")]
    empty = [ln for ln in rows if any(not cell.strip() for cell in ln.strip().strip("|").split(" | "))]
    assert not empty, f"summary.json fields without a meaning (Annotated[..., doc('...')]): {empty}"
    assert "| `machine` | a Machine record |" in results and "## summary.json `machine`" in results


def build_site(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` as `make docs` runs it (no -q: quiet mode hides the warnings strict counts)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


LINK = re.compile(r'(?:href|src)="([^"#?]+)[^"]*"')


def dead_links(site: Path) -> list[str]:
    """Every relative href / src of the built site whose target is not in it (`page -> target`)."""
    dead = []
    for page in site.rglob("*.html"):
        for target in LINK.findall(page.read_text(errors="replace")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                continue  # http:, mailto:, data: ... (the site is offline-checked only for its own files)
            path = (site / target.lstrip("/")) if target.startswith("/") else page.parent / target
            if not (path.is_file() or (path / "index.html").is_file()):
                dead.append(f"{page.relative_to(site)} -> {target}")
    return dead


def test_the_docs_site_builds_in_strict_mode_and_every_link_leads_somewhere(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    done = build_site(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "add_an_algorithm" / "index.html").is_file()
    assert (tmp_path / "site" / "results" / "demo" / "report.html").is_file()  # copied in by docs/hooks
    assert dead_links(tmp_path / "site") == []


def test_a_broken_link_fails_the_docs_check(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    import shutil

    for name in ("docs", "results", "conf/experiment", "README.md", "mkdocs.yml"):  # the site's sources
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, tmp_path / name)
    page = tmp_path / "docs" / "quickstart.md"
    page.write_text(page.read_text() + "\n[gone](missing.md) and [also gone](../nowhere/file.txt)\n")
    assert build_site(tmp_path / "mkdocs.yml", tmp_path / "site").returncode == 0  # mkdocs: info level only...
    assert dead_links(tmp_path / "site") == ["quickstart/index.html -> missing.md",  # ...the crawl finds both
                                             "quickstart/index.html -> ../nowhere/file.txt"]


def reproduce_bench_commands() -> list[str]:
    """Every `tokenrouter bench ...` command docs/reproduce.md gives (table cells and shell blocks)."""
    text = (ROOT / "docs" / "reproduce.md").read_text()
    found = re.findall(r"`(tokenrouter bench [^`]+)`", text) + re.findall(r"^(tokenrouter bench .+)$", text, re.M)
    return list(dict.fromkeys(found))


def test_reproduce_commands_plan_on_the_papers_gpus(capsys: pytest.CaptureFixture) -> None:
    """Each bench command of docs/reproduce.md composes and plans on 8 x 80 GiB GPUs (the rehearsal, which runs
    them, is `make rehearse`); on the torch engine here, where SGLang is not installed."""
    from tokenrouter.cli import main

    commands = reproduce_bench_commands()
    assert len(commands) >= 9
    for command in commands:
        argv = [*shlex.split(command)[2:], "models.engine=torch", "--gpus", "8", "--gpu-memory-gib", "80"]
        assert main(["plan", *argv]) == 0, (command, capsys.readouterr().err)


@pytest.mark.rehearsal
@pytest.mark.parametrize("command", reproduce_bench_commands())
def test_reproduce_commands_rehearse(command: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """docs/reproduce.md's commands as written, `bench` -> `rehearse` (the torch engine where SGLang is not
    installed): no job FAILED; a job a CPU cannot run says which step."""
    import importlib.util

    from tokenrouter.cli import main

    argv = shlex.split(command)[2:] + ([] if importlib.util.find_spec("sglang") else ["models.engine=torch"])
    code = main(["rehearse", *argv, "--out", str(tmp_path)])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("job ")]
    assert code == 0 and lines and not [ln for ln in lines if " FAILED " in ln], lines
