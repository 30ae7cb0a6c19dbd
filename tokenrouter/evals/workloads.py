"""Workloads: the problems a benchmark run sends, loaded by name from the `workload` config group.

A workload is model-agnostic: problems carry chat messages (rendered later with the entry model's chat
template by `encode_problem`) or pre-tokenized prompt ids (synthetic). Loaders are looked up by `workload.loader` (default:
`workload.name`) in `LOADER_REGISTRY` (tokenrouter/registry.py): built in (`LOADERS`, "module:function" strings
imported on first use), an installed entry point in the `tokenrouter.workloads` group, or a YAML's own
`loader: mypackage.module:function`, so a new workload is one function plus one YAML.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokenrouter.errors import UserError
from tokenrouter.registry import Registry

KINDS = ("math", "choice", "none")


@dataclass
class Problem:
    """One prompt. Exactly one of `messages` / `prompt_ids` is set. `max_prompt_tokens` caps the rendered
    prompt (long agentic traces drop their oldest middle turns to fit)."""

    index: int
    messages: list[dict] | None
    prompt_ids: list[int] | None
    answer: str | None
    kind: str = "none"  # "math" | "choice" | "none" (not graded)
    max_prompt_tokens: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the source row, the shuffled options

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt_ids is None):
            raise ValueError(f"problem {self.index}: set exactly one of messages / prompt_ids")
        if self.kind not in KINDS:
            raise ValueError(f"problem {self.index}: kind must be one of {KINDS}, got {self.kind!r}")


@dataclass
class Workload:
    name: str
    problems: list[Problem]
    max_new_tokens: int
    kind: str  # the problems' kind: decides how responses are graded


LOADERS: dict[str, str] = {
    "math": "tokenrouter.evals.loaders:load_math",  # amc23, aime24, aime25, math500, gsm8k, low_effort, high_effort
    "choice": "tokenrouter.evals.loaders:load_choice",  # gpqa
    "agentic": "tokenrouter.evals.loaders:load_agentic",
    "synthetic": "tokenrouter.evals.loaders:load_synthetic",
    "arith": "tokenrouter.evals.arith:load_arith",
}
LOADER_REGISTRY = Registry("workload loader", "tokenrouter.workloads", LOADERS, dotted="package.module:function")
GENERATED = {"synthetic", "arith"}  # loaders that make their problems and read no data file


def loader_function(name: str, loader: str) -> Callable[[Any, int], Workload]:
    """The loader `workload.loader` names (built in, an installed entry point in the `tokenrouter.workloads`
    group, or `package.module:function`, importable from the working directory); one line naming the
    workload if none."""
    try:
        return LOADER_REGISTRY.get(loader)
    except UserError as exc:
        raise UserError(f"workload {name}: {exc}") from None


def load_workload(cfg: Any, seed: int = 0) -> Workload:
    """The workload described by the `workload` config node; `seed` drives synthetic prompts and option order."""
    name = cfg.get("name") if hasattr(cfg, "get") else None
    if not name:
        raise UserError("workload: config needs a `name`")
    loader = str(cfg.get("loader") or name)
    path = cfg.get("path")
    if loader in GENERATED and path:  # never silently ignored: the user meant some data to be used
        raise UserError(f"workload.path is not used by workload {name} (its problems are generated, not read "
                        f"from a file); drop workload.path={path}")
    load = loader_function(str(name), loader)
    workload = load(cfg, seed)
    if not workload.problems:
        raise UserError(f"workload {name}: no problems selected")
    if workload.max_new_tokens < 1:
        raise UserError(f"workload {name}: max_new_tokens must be >= 1, got {workload.max_new_tokens}")
    return workload


def encode_problem(problem: Problem, tokenizer: Any) -> list[int]:
    """Prompt token ids: pre-tokenized ids as they are, else the chat template with the generation prompt."""
    if problem.prompt_ids is not None:
        return list(problem.prompt_ids)
    if tokenizer is None:
        raise UserError(
            f"problem {problem.index}: a chat workload needs the entry model's tokenizer; "
            "weightless (sim) models run token-id workloads such as workload=synthetic"
        )
    messages = [dict(m) for m in problem.messages or []]
    ids = _render(messages, tokenizer)
    if problem.max_prompt_tokens and len(ids) > problem.max_prompt_tokens:
        ids = _fit(messages, tokenizer, problem.max_prompt_tokens)
    return ids


def _render(messages: list[dict], tokenizer: Any) -> list[int]:
    out = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _fit(messages: list[dict], tokenizer: Any, budget: int) -> list[int]:
    """Drop the fewest oldest middle turns (after the system prompt and the task statement, before the last
    turn) so the rendered prompt fits `budget`; if the kept turns alone are too long, cut the longest one."""
    head = 2 if messages and messages[0].get("role") == "system" else 1
    middle = max(len(messages) - head - 1, 0)
    lo, hi = 0, middle  # binary search: the fewest dropped turns that fit (length falls as more are dropped)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_render(messages[:head] + messages[head + mid :], tokenizer)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    kept = messages[:head] + messages[head + lo :]
    ids = _render(kept, tokenizer)
    for _ in range(20):
        if len(ids) <= budget:
            return ids
        longest = max(kept, key=lambda m: len(str(m.get("content", ""))))
        text = str(longest.get("content", ""))
        keep_chars = int(len(text) * max(budget - 8, 1) / len(ids) * 0.95)
        if keep_chars >= len(text) or keep_chars <= 0:
            break
        longest["content"] = text[:keep_chars]
        ids = _render(kept, tokenizer)
    if len(ids) > budget:
        raise UserError(f"prompt of {len(ids)} tokens cannot be cut to max_prompt_tokens={budget}")
    return ids
