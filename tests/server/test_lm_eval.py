"""lm-evaluation-harness (`lm_eval --model local-completions` and `local-chat-completions`) runs a small
generate_until task, whose YAML and data the test writes, against `tokenrouter serve models=tiny` (the trained
local pair, routed token by token with R-Stitch) to completion, and scores exactly what `tokenrouter bench
workload=arith` scores on the same problems: the same prompts (the chat template applied by the server for
chat, pre-rendered for completions), the same greedy outputs, graded by the same function.

Needs `pip install "lm-eval[api]"` (`make test-clients` installs it). Slow: a bench run and four lm_eval
processes, each importing torch and datasets."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..runtime.http_helpers import ROOT, start_server, stop_cleanly

PROBLEMS = 12
ALGORITHM = ["models=tiny", "algorithm=rstitch", "runtime.thresholds=[1,1]"]

TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{{field}}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["Problem:"]
  max_gen_toks: 96
  do_sample: false
process_results: !function grade.process_results
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""

# the bench's grader, so both sides score a response the same way
GRADE = """from tokenrouter.tasks.grading import is_correct


def process_results(doc, results):
    return {"exact_match": float(is_correct(results[0], doc["answer"], "math"))}
"""


def write_tasks(tmp: Path) -> Path:
    from tokenrouter.engine.loader import load_tokenizer
    from tokenrouter.tasks.arith import ArithSpec, generate, messages

    tokenizer = load_tokenizer("tiny:small")
    rows = []
    for p in generate(ArithSpec(), seed=0, count=PROBLEMS):  # = workload=arith's first problems at seed 0
        rendered = tokenizer.apply_chat_template(messages(p), add_generation_prompt=True, tokenize=False)
        rows.append({"question": p.prompt, "rendered": rendered, "answer": p.answer})
    data = tmp / "arith.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp / "tasks"
    tasks.mkdir()
    (tasks / "grade.py").write_text(GRADE)
    for name, field in (("tr_arith_chat", "question"), ("tr_arith_text", "rendered")):
        (tasks / f"{name}.yaml").write_text(TASK.format(name=name, data=data, field=field))
    return tasks


def run_lm_eval(model: str, url: str, task: str, tasks: Path, out: Path, extra: list[str]) -> tuple[float, list]:
    args = f"model=tiny,base_url={url},tokenizer_backend=None,tokenized_requests=False,num_concurrent=2," \
           "max_retries=1"
    lm_eval = [shutil.which("lm_eval") or str(Path(sys.executable).with_name("lm_eval"))]
    proc = subprocess.run([*lm_eval, "--model", model, "--model_args", args, "--tasks", task, "--include_path",
                           str(tasks), "--output_path", str(out), "--log_samples", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    score = json.loads(next(out.rglob("results_*.json")).read_text())["results"][task]["exact_match,none"]
    samples = [json.loads(line) for line in next(out.rglob(f"samples_{task}_*.jsonl")).read_text().splitlines()]
    return score, sorted(samples, key=lambda s: s["doc_id"])


def check_export_matches(bench: Path, task: str, score: float, samples: list[dict]) -> None:
    """`tokenrouter report --format lm-eval` on the bench run: lm-eval's own file shapes and figures."""
    from tokenrouter.cli import main

    out = bench / f"lm_eval_{task}"
    assert main(["report", "--format", "lm-eval", "--task", task, "--out", str(out), str(bench)]) == 0
    ours = json.loads(next(out.glob("results_*.json")).read_text())
    assert ours["results"][task]["exact_match,none"] == pytest.approx(score)
    assert {"exact_match,none", "exact_match_stderr,none", "alias"} <= ours["results"][task].keys()
    exported = [json.loads(line) for line in next(out.glob(f"samples_{task}_*.jsonl")).read_text().splitlines()]
    assert set(samples[0]) <= set(exported[0])  # every key lm-eval writes per sample
    assert [s["resps"] for s in exported] == [s["resps"] for s in samples]
    assert [s["exact_match"] for s in exported] == [s["exact_match"] for s in samples]
    assert [s["target"] for s in exported] == [s["target"] for s in samples]


@pytest.mark.slow
def test_lm_eval_scores_what_bench_scores_on_the_same_problems(tmp_path: Path) -> None:
    pytest.importorskip("lm_eval")
    from tokenrouter.cli import main

    bench = tmp_path / "bench"
    assert main(["bench", *ALGORITHM, "workload=arith", f"workload.num_problems={PROBLEMS}", "concurrency=2",
                 f"hydra.run.dir={bench}"]) == 0
    summary = json.loads((bench / "summary.json").read_text())
    rows = sorted((json.loads(line) for line in (bench / "requests.jsonl").read_text().splitlines()),
                  key=lambda r: r["index"])
    assert summary["handoffs_per_request"] > 0  # routed token by token, not one model alone

    tasks = write_tasks(tmp_path)
    server = start_server(ALGORITHM, tmp_path)
    try:
        for model, path, task, extra in (
                ("local-chat-completions", "/v1/chat/completions", "tr_arith_chat", ["--apply_chat_template"]),
                ("local-completions", "/v1/completions", "tr_arith_text", [])):
            score, samples = run_lm_eval(model, f"{server.url}{path}", task, tasks, tmp_path / model, extra)
            texts = [s["resps"][0][0] for s in samples]
            assert texts == [r["text"] for r in rows], model  # token for token the bench's outputs
            assert score == pytest.approx(summary["accuracy"]), model
            check_export_matches(bench, task, score, samples)
    finally:
        stop_cleanly(server, signal.SIGTERM)
