"""lm-evaluation-harness (`lm_eval --model local-completions` and `local-chat-completions`) runs a small
generate_until task, whose YAML and data the test writes, against `tokenrouter serve models=tiny` (the trained
local pair) to completion (46 s here). Needs `pip install "lm-eval[api]"` (not in the default extras: the
default suite skips this slow test). Slow: two lm_eval processes, each importing torch and datasets."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .http_helpers import ROOT, start_server, stop_cleanly

TASK = """task: tr_arith
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["Problem:"]
  max_gen_toks: 96
  do_sample: false
filter_list:
  - name: boxed
    filter:
      - function: regex
        regex_pattern: "boxed\\\\{{(-?[0-9]+)\\\\}}"
      - function: take_first
metric_list:
  - metric: exact_match
"""


@pytest.mark.slow
def test_lm_eval_local_completions_and_chat_run_to_completion(tmp_path: Path) -> None:
    pytest.importorskip("lm_eval")
    from tokenrouter.tasks.arith import ArithSpec, generate

    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps({"question": p.prompt, "answer": p.answer}) + "\n"
                            for p in generate(ArithSpec(), seed=0, count=4)))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tr_arith.yaml").write_text(TASK.format(data=data))
    server = start_server(["models=tiny", "runtime.thresholds=[1,1]"], tmp_path)
    try:
        for model, path, extra in (("local-completions", "/v1/completions", []),
                                   ("local-chat-completions", "/v1/chat/completions", ["--apply_chat_template"])):
            out = tmp_path / model
            args = f"model=tiny,base_url={server.url}{path},tokenizer_backend=None,tokenized_requests=False," \
                   "num_concurrent=2,max_retries=1"
            lm_eval = [shutil.which("lm_eval") or str(Path(sys.executable).with_name("lm_eval"))]
            proc = subprocess.run([*lm_eval, "--model", model, "--model_args", args, "--tasks", "tr_arith",
                                   "--include_path", str(tasks), "--output_path", str(out), *extra],
                                  cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr[-3000:]
            results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]["tr_arith"]
            assert 0.0 <= results["exact_match,boxed"] <= 1.0
    finally:
        stop_cleanly(server, signal.SIGTERM)
