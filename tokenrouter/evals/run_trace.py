"""`runtime.trace` in a bench run: trace.json (every batch and request, Perfetto-ready), its figures for
summary.json, and samples.json (a few responses token by token with the model that produced each token, for
the HTML report's coloured view)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tokenrouter.fsutil import atomic_write_text
from tokenrouter.generation import GenerationResult
from tokenrouter.system import ServingSystem
from tokenrouter.trace.chrome import chrome_trace, write_trace
from tokenrouter.trace.record import RequestSpan
from tokenrouter.trace.summary import TRACE_FILE, summarize

log = logging.getLogger(__name__)

SAMPLES_FILE = "samples.json"
SAMPLE_REQUESTS = 8
SAMPLE_TOKENS = 400  # per response: the view is for reading, not for the whole of a 32k-token proof


def write_run_trace(out: Path, system: ServingSystem, system_name: str, results: list[GenerationResult],
                    rows: list[dict[str, Any]], tokenizer: Any) -> dict[str, Any]:
    """Write trace.json and samples.json into the run dir `out`; returns the trace's figures."""
    trace = system.trace_log()
    if trace is None:
        log.warning("runtime.trace: system %s records no batches; %s shows its requests only", system_name,
                    TRACE_FILE)
    if trace is not None and trace.capped():
        log.warning("runtime.trace: %s reached runtime.trace_max_batches=%d; later batches are not in %s",
                    ", ".join(trace.capped()), trace.cap, TRACE_FILE)
    spans = trace.requests if trace is not None and trace.requests else [RequestSpan.of(r) for r in results]
    doc = chrome_trace(trace, system.model_names, system_name, spans)
    write_trace(out / TRACE_FILE, doc)
    atomic_write_text(out / SAMPLES_FILE, json.dumps(token_samples(rows, system.model_names, tokenizer)))
    return summarize(doc)


def token_samples(rows: list[dict[str, Any]], models: list[str], tokenizer: Any,
                  count: int = SAMPLE_REQUESTS, max_tokens: int = SAMPLE_TOKENS) -> dict[str, Any]:
    """The first `count` finished responses (by workload index) as [text, model index] per output token; the
    text of token k is what it adds to the decoded output (so multi-byte characters split over tokens stay
    readable); weightless models show token ids."""
    index = {m: i for i, m in enumerate(models)}
    done = sorted((r for r in rows if r.get("finish_reason") != "error"), key=lambda r: r["index"])[:count]
    samples = []
    for row in done:
        ids = list(row["output_ids"])[:max_tokens]
        owners = [index.get(model, 0) for model, n in row.get("model_runs") or [] for _ in range(n)][:len(ids)]
        owners += [0] * (len(ids) - len(owners))
        pieces = _pieces(ids, tokenizer)
        samples.append({"index": row["index"], "prompt": row.get("prompt_text", ""), "handoffs": row.get("handoffs"),
                        "truncated": len(row["output_ids"]) > max_tokens, "correct": row.get("correct"),
                        "tokens": [[p, m] for p, m in zip(pieces, owners, strict=True)]})
    return {"models": list(models), "samples": samples}


def _pieces(ids: list[int], tokenizer: Any) -> list[str]:
    if tokenizer is None:
        return [f"{t} " for t in ids]
    pieces, before = [], ""
    for k in range(len(ids)):
        text = tokenizer.decode(ids[: k + 1], skip_special_tokens=False)
        pieces.append(text[len(before):] if text.startswith(before) else text)
        before = text
    return pieces
