"""A benchmark run as lm-evaluation-harness output: `results_<date>.json` and `samples_<task>_<date>.jsonl`.

Why: researchers already compare models with lm-eval's files (its result tables, Zeno/W&B loggers, their own
scripts reading `results[task]["exact_match,none"]` and the samples' `resps` / `filtered_resps`). Writing a
TokenRouter run in the same shape puts a token-level-routed system in those tools without rerunning it
through lm-eval. Keys, file names, hashes and the metric's standard error follow lm-eval 0.4 (its
`evaluator.py` sample records and `EvaluationTracker.save_results_aggregated`); the TokenRouter figures a
run adds (throughput, large-token share, hand-offs) ride along under `tokenrouter`.

Only graded workloads export (every row of requests.jsonl has `correct`): the metric is `exact_match`, the
bench's own grading (answer extracted as in tokenrouter.tasks.grading, compared by equivalence), and `filtered_resps`
holds the extracted answer, as an lm-eval filter would.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from tokenrouter.errors import UserError
from tokenrouter.fsutil import atomic_write_text
from tokenrouter.jsonl import read_json_objects

METRIC = "exact_match"
FILTER = "none"
ROUTING_FIELDS = ("throughput_tok_s", "per_request_throughput_tok_s", "output_throughput", "large_token_share",
                  "handoffs_per_request", "concurrency", "system", "model_set", "tp", "algorithm")


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def mean_stderr(values: list[float]) -> float | str:
    """lm-eval's `mean_stderr`: the sample standard deviation over sqrt(n); "N/A" below two samples, as
    lm-eval writes it (strict JSON has no NaN)."""
    n = len(values)
    if n < 2:
        return "N/A"
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def sample_record(row: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """One samples_*.jsonl line (lm-eval's evaluator record for a generate_until request)."""
    doc = {"prompt": row.get("prompt_text"), "answer": row["gold"]}
    prompt = str(row.get("prompt_text") or "")
    target = str(row["gold"])
    score = float(bool(row["correct"]))
    return {
        "doc_id": row["index"],
        "doc": doc,
        "target": target,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {"max_gen_toks": max_tokens, "until": []}}},
        "resps": [[row.get("text") or ""]],
        "filtered_resps": [row.get("extracted") or "[invalid]"],
        "filter": FILTER,
        "metrics": [METRIC],
        "doc_hash": _hash(json.dumps(doc, indent=2, ensure_ascii=False)),
        "prompt_hash": _hash(prompt),
        "target_hash": _hash(target),
        METRIC: score,
        # TokenRouter's per-request routing trace, for error analysis next to the response
        "model_runs": row.get("model_runs"),
        "finish_reason": row.get("finish_reason"),
    }


def export_run(run_dir: Path, task: str | None = None, out: Path | None = None) -> tuple[Path, Path]:
    """Write the run's lm-eval files into `out` (default: the run dir); returns (results, samples) paths."""
    summary_path, requests_path = run_dir / "summary.json", run_dir / "requests.jsonl"
    if not summary_path.is_file() or not requests_path.is_file():
        raise UserError(f"{run_dir}: not a completed run (needs summary.json and requests.jsonl)")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    rows = sorted(read_json_objects(requests_path), key=lambda r: r["index"])
    if not rows or any(r.get("correct") is None or r.get("gold") is None for r in rows):
        raise UserError(f"{run_dir}: lm-eval export needs a graded workload run by this version (every request "
                        "with `gold` and `correct` in requests.jsonl)")
    task = task or f"tokenrouter_{summary.get('workload') or 'task'}"
    max_tokens = max(len(r.get("output_ids") or []) for r in rows)
    samples = [sample_record(r, max_tokens) for r in rows]
    scores = [s[METRIC] for s in samples]
    prov = summary.get("provenance") or {}
    model = str(summary.get("model_set") or "tokenrouter")
    results = {
        "results": {task: {"alias": task, f"{METRIC},{FILTER}": sum(scores) / len(scores),
                           f"{METRIC}_stderr,{FILTER}": mean_stderr(scores)}},
        "group_subtasks": {task: []},
        "configs": {task: {"task": task, "output_type": "generate_until",
                           "metric_list": [{"metric": METRIC, "aggregation": "mean", "higher_is_better": True}],
                           "generation_kwargs": {"max_gen_toks": max_tokens}, "num_fewshot": 0,
                           "metadata": {"source": "tokenrouter bench", "run_dir": str(run_dir)}}},
        "versions": {task: 0},
        "n-shot": {task: 0},
        "higher_is_better": {task: {METRIC: True}},
        "n-samples": {task: {"original": len(samples), "effective": len(samples)}},
        "config": {"model": "tokenrouter", "model_args": f"system={summary.get('system')},model_set={model}",
                   "batch_size": summary.get("concurrency"), "limit": None},
        "task_hashes": {task: _hash("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"]
                                            for s in samples))},
        "git_hash": (prov.get("git_commit") or "")[:7] or None,
        "date": prov.get("date"),
        "model_name": model,
        "model_name_sanitized": model.replace("/", "__"),
        "total_evaluation_time_seconds": str(summary.get("elapsed_s")),
        "tokenrouter": {k: summary.get(k) for k in ROUTING_FIELDS},
    }
    out = out or run_dir
    out.mkdir(parents=True, exist_ok=True)
    date_id = datetime.now().isoformat().replace(":", "-")  # lm-eval's file-name date
    results_path, samples_path = out / f"results_{date_id}.json", out / f"samples_{task}_{date_id}.jsonl"
    atomic_write_text(samples_path, "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in samples))
    atomic_write_text(results_path, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return results_path, samples_path
