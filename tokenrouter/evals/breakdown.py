"""Two reports for the baselines on real servers: where a Std. Serving step goes (the paper's Table 10: of a
37.2 ms small-model step on SGLang, 1.56 ms is inference) on SGLang's servers and on ours, and every system's
throughput beside TokenRouter's on the same prompts (`tokenrouter bench -m +experiment=sglang_baselines`).

SGLang's side is split by its own scheduler stage timers (/metrics `sglang:scheduler_stage_seconds_total`):
`get_next_batch_to_run` is prefix matching, cache locking and KV allocation, `process_batch_result` is the
radix-cache insert, unlocking and output; what the scheduler loop does not account for (tokenizer manager,
detokenizer and their ZMQ hops, queueing) is `tokenizer + IPC`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tokenrouter.evals import paper
from tokenrouter.evals.comparable import config_keys, setting_ids
from tokenrouter.evals.left_out import leave_out
from tokenrouter.evals.runs_table import THROUGHPUT, has, series_label, server_of
from tokenrouter.evals.store import load_requests
from tokenrouter.evals.tables import write_table

COST = "stats.models.{model}.per_token_ms.{key}"
COLUMNS = [  # (per_token_ms key, column)
    ("dispatch", "step ms"),
    ("model_step", "inference"),
    ("sglang_get_next_batch_to_run", "match + lock + alloc"),
    ("sglang_process_batch_result", "radix insert + unlock"),
    ("sglang_tokenizer_ipc", "tokenizer + IPC"),
    ("sglang_scheduler", "scheduler other"),  # the remaining stages (recv, process_input, ...): set below
    ("server_bookkeeping", "server other"),
    ("client_http_json", "HTTP + JSON"),
    ("dispatcher_routing", "dispatcher"),
]


def _int(v: object) -> object:
    return int(v) if isinstance(v, int | float) and pd.notna(v) and float(v).is_integer() else v


def same_outputs(run_dir: str, other_dir: str) -> str:
    """How many requests of two runs on the same prompts produced identical token ids ("k/n")."""
    a = load_requests(run_dir).set_index("index")["output_ids"]
    b = load_requests(other_dir).set_index("index")["output_ids"]
    shared = a.index.intersection(b.index)
    return f"{sum(list(a[i]) == list(b[i]) for i in shared)}/{len(shared)}"


def breakdown_rows(df: pd.DataFrame) -> list[dict[str, object]]:
    runs = has(df, "system")
    rows: list[dict[str, object]] = []
    for _, run in runs[runs["system"] == "std_serving"].iterrows():
        models = sorted({c.split(".")[2] for c in run.index if c.startswith("stats.models.") and
                         c.endswith(".per_token_ms.dispatch") and pd.notna(run[c])})
        for model in models:
            cell = {column: run.get(COST.format(model=model, key=key)) for key, column in COLUMNS}
            if server_of(run) == "sglang":  # its "server other" is split into the stages above
                cell["server other"] = None
                cell["scheduler other"] -= cell["match + lock + alloc"] + cell["radix insert + unlock"]
            step, infer = cell["step ms"], cell["inference"]
            rows.append({"server": server_of(run), "models": run.get("models"), "model": model,
                         "N": _int(run.get("concurrency")), **cell,
                         "inference %": 100 * infer / step if pd.notna(infer) and step else None})
    return rows


def serving_breakdown(df: pd.DataFrame, out: Path) -> list[Path]:
    rows = breakdown_rows(df)
    if not rows:
        return []
    p = paper.STD_SERVING_STEP_MS
    rows.append({"server": "sglang (paper, GPU)", "models": "Qwen3 pairs", "model": "small", "N": "--",
                 "step ms": p["step"], "inference": p["inference"],
                 "match + lock + alloc": p["prefix_matching"] + p["cache_locks"], "radix insert + unlock":
                 p["radix_updates"], "tokenizer + IPC": None, "scheduler other": None, "server other": p["other"],
                 "HTTP + JSON": None,
                 "dispatcher": None, "inference %": 100 * p["inference"] / p["step"]})
    caption = ("Std. Serving: where one dispatcher step (one token asked of one server, the whole prefix resent) "
               "goes, ms per step. SGLang's server side from its own scheduler stage timers; ours from our "
               "server's engine busy time; at N > 1 the server's residual (tokenizer + IPC, server other) includes waiting "
               "behind other requests' forwards. Paper (Table 10): 37.2 ms per small-model step, 1.56 ms inference.")
    return write_table(pd.DataFrame(rows), out, "std_serving_breakdown", caption)


def systems_side_by_side(df: pd.DataFrame, out: Path) -> list[Path]:
    """Every run of a configuration that ran on real SGLang servers and on TokenRouter, with TokenRouter's
    throughput ratio against it (same models, workload, N and every other config key but the system's)."""
    runs = has(df, "system", THROUGHPUT)
    if runs.empty:
        return []
    runs = runs.assign(setting=setting_ids(runs, config_keys(runs, without=("system.",))),
                       on=runs.apply(server_of, axis=1))
    sglang = runs.groupby("setting")["on"].transform(lambda on: (on == "sglang").any()).astype(bool)
    routed = runs.groupby("setting")["system"].transform(lambda s: (s == "tokenrouter").any()).astype(bool)
    leave_out("sglang_baselines", runs[sglang & ~routed & (runs["on"] == "sglang")],
              "no TokenRouter run of the same configuration to compare with")
    runs = runs[sglang & routed]
    if runs.empty:
        return []
    rows = []
    for _, group in runs.groupby("setting"):
        models, workload, n = (group.iloc[0].get(c) for c in ("models", "workload", "concurrency"))
        router = group[group["system"] == "tokenrouter"][THROUGHPUT].mean()
        for _, run in group.iterrows():
            ours = group[(group["system"] == run["system"]) & (group.apply(server_of, axis=1) == "tokenrouter")]
            same = (same_outputs(run["run_dir"], ours.iloc[0]["run_dir"])
                    if server_of(run) == "sglang" and not ours.empty else None)
            rows.append({"models": models, "workload": workload, "N": _int(n), "system": series_label(run),
                         "server": server_of(run), "accuracy": run.get("accuracy"),
                         "large share": run.get("large_token_share"), "tok/s": run[THROUGHPUT],
                         "TokenRouter x": router / run[THROUGHPUT] if pd.notna(router) else None,
                         "same outputs as ours": same})
    caption = ("Baselines on real SGLang servers and on ours, same prompts: accuracy, throughput, "
               "TokenRouter's throughput divided by each system's, and for a run on SGLang the requests whose "
               "greedy output equals the same system's on our servers.")
    return write_table(pd.DataFrame(rows), out, "sglang_baselines", caption)
