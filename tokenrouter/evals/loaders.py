"""Workload loaders (registered by name in `tokenrouter.evals.workloads.LOADERS`): math, multiple choice, agentic traces and
synthetic token ids. Column names, prompt templates and limits all come from the workload YAML, so a new data
set with the same shape needs only a config file."""

from __future__ import annotations

import json
import random
from typing import Any

from tokenrouter.errors import UserError
from tokenrouter.evals.datasets import cfg_get, load_records, require_fields
from tokenrouter.evals.workloads import Problem, Workload

MATH_PROMPT = "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{}."
CHOICE_PROMPT = (
    "{question}\n\n{options}\n\nPlease reason step by step, and put the letter of the correct option "
    "within \\boxed{}, e.g. \\boxed{A}."
)
LETTERS = "ABCDEFGHIJ"
# each record loader's roles -> the columns it reads by default (`workload.fields` overrides them)
MATH_FIELDS = {"question": "problem", "answer": "answer"}
CHOICE_FIELDS = {"question": "Question", "correct": "Correct Answer", "incorrect": []}
AGENTIC_FIELDS = {"messages": "messages"}


def _fields(cfg: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """`workload.fields` (role -> column name) over the loader's defaults."""
    given = cfg_get(cfg, "fields", {})
    if not hasattr(given, "items"):
        raise UserError(
            f"workload {cfg_get(cfg, 'name', '?')}: workload.fields must map roles to column names"
        )
    unknown = sorted(set(given) - set(defaults))
    if unknown:  # a misspelt role would otherwise make the loader ask for a column nobody named
        raise UserError(f"workload {cfg_get(cfg, 'name', '?')}: unknown workload.fields role(s) {unknown}; this "
                        f"loader's roles: {sorted(defaults)}")
    # list-valued roles (several option columns) arrive as OmegaConf ListConfig: make them plain lists
    plain = {k: v if v is None or isinstance(v, str) else [str(c) for c in v] for k, v in given.items()}
    return {**defaults, **plain}


def _flat(fields: dict[str, Any]) -> dict[str, str]:
    """Role -> column for every column a loader reads (list-valued roles become role.0, role.1, ...)."""
    out = {}
    for role, column in fields.items():
        if isinstance(column, list):
            out.update({f"{role}.{i}": str(c) for i, c in enumerate(column)})
        elif column is not None:
            out[role] = str(column)
    return out


def _messages(cfg: Any, content: str) -> list[dict[str, str]]:
    system = cfg_get(cfg, "system_prompt")
    return ([{"role": "system", "content": str(system)}] if system else []) + [
        {"role": "user", "content": content}
    ]


def _answer_text(value: Any, after: str | None) -> str:
    """The gold answer as text; `after` keeps what follows its last occurrence (GSM8K: '#### 72')."""
    text = str(value).strip()
    if after and after in text:
        text = text.rsplit(after, 1)[1].strip().replace(",", "")
    return text


def load_math(cfg: Any, seed: int = 0) -> Workload:
    """Free-form math problems graded by equivalence of the final \\boxed{} answer."""
    name = str(cfg_get(cfg, "name", "math"))
    rows, source = load_records(cfg)
    fields = _fields(cfg, MATH_FIELDS)
    require_fields(rows, _flat(fields), source, name)
    template = str(cfg_get(cfg, "prompt", MATH_PROMPT))
    after = cfg_get(cfg, "answer_after")
    problems = [
        Problem(
            index=i,
            messages=_messages(cfg, template.replace("{question}", str(row[fields["question"]]).strip())),
            prompt_ids=None,
            answer=_answer_text(row[fields["answer"]], after),
            kind="math",
            meta={"row": row["_row"]},
        )
        for i, row in enumerate(rows)
    ]
    return Workload(
        name=name, problems=problems, max_new_tokens=int(cfg_get(cfg, "max_new_tokens", 2048)), kind="math"
    )


def load_choice(cfg: Any, seed: int = 0) -> Workload:
    """Multiple choice (GPQA): options shuffled per problem from (seed, row), gold answer = the correct letter."""
    name = str(cfg_get(cfg, "name", "choice"))
    rows, source = load_records(cfg)
    fields = _fields(cfg, CHOICE_FIELDS)
    if not isinstance(fields["incorrect"], list) or not fields["incorrect"]:
        raise UserError(f"workload {name}: workload.fields.incorrect must list the wrong-option columns")
    if len(fields["incorrect"]) + 1 > len(LETTERS):
        raise UserError(f"workload {name}: at most {len(LETTERS)} options")
    require_fields(rows, _flat(fields), source, name)
    template = str(cfg_get(cfg, "prompt", CHOICE_PROMPT))
    problems = []
    for i, row in enumerate(rows):
        correct = str(row[fields["correct"]]).strip()
        options = [correct] + [str(row[c]).strip() for c in fields["incorrect"]]
        random.Random(f"{name}:{seed}:{row['_row']}").shuffle(options)
        letter = LETTERS[options.index(correct)]
        listing = "\n".join(f"{LETTERS[k]}) {text}" for k, text in enumerate(options))
        content = template.replace("{question}", str(row[fields["question"]]).strip()).replace(
            "{options}", listing
        )
        problems.append(
            Problem(
                i,
                _messages(cfg, content),
                None,
                letter,
                "choice",
                meta={"row": row["_row"], "options": options},
            )
        )
    return Workload(
        name=name, problems=problems, max_new_tokens=int(cfg_get(cfg, "max_new_tokens", 2048)), kind="choice"
    )


def load_agentic(cfg: Any, seed: int = 0) -> Workload:
    """Long multi-turn agent trajectories: the prompt is the conversation before its last assistant turn (the
    turn the model now writes), capped at `workload.max_prompt_tokens` by dropping the oldest middle turns."""
    name = str(cfg_get(cfg, "name", "agentic"))
    rows, source = load_records(cfg)
    fields = _fields(cfg, AGENTIC_FIELDS)
    require_fields(rows, _flat(fields), source, name)
    cap = int(cfg_get(cfg, "max_prompt_tokens", 8192))
    problems = []
    for i, row in enumerate(rows):
        turns = _turns(row[fields["messages"]], f"workload {name}: {source} row {row['_row']}")
        last_assistant = max((k for k, m in enumerate(turns) if m["role"] == "assistant"), default=len(turns))
        prompt = turns[:last_assistant] or turns
        problems.append(
            Problem(i, prompt, None, None, "none", max_prompt_tokens=cap, meta={"row": row["_row"]})
        )
    return Workload(
        name=name, problems=problems, max_new_tokens=int(cfg_get(cfg, "max_new_tokens", 1024)), kind="none"
    )


def _turns(value: Any, where: str) -> list[dict[str, str]]:
    """Chat turns from a JSON string or a list of {role, content} (content may be a list of text parts;
    tool calls are kept as JSON text so the prompt length stays realistic)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: messages are not valid JSON ({exc.msg})") from None
    if hasattr(value, "tolist"):  # a numpy array from Parquet
        value = value.tolist()
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: messages must be a non-empty list of {{role, content}}")
    turns = []
    for m in value:
        if not isinstance(m, dict) or "role" not in m:
            raise UserError(f"{where}: every message needs a `role`")
        content = m.get("content") or ""
        if not isinstance(content, str):
            parts = content.tolist() if hasattr(content, "tolist") else content
            content = "".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in parts)
        if m.get("tool_calls"):
            content += "\n" + json.dumps(m["tool_calls"], default=str)
        turns.append({"role": str(m["role"]), "content": content})
    return turns


def load_synthetic(cfg: Any, seed: int = 0) -> Workload:
    """Seeded random prompt ids for system studies: `num_requests` prompts of `prompt_tokens` ids drawn from
    [token_low, token_high) (default 4..99: valid for the 100-token char tokenizer without its special ids
    0-3, and for sim engines)."""
    name = str(cfg_get(cfg, "name", "synthetic"))
    num, length = int(cfg_get(cfg, "num_requests", 16)), int(cfg_get(cfg, "prompt_tokens", 32))
    low, high = int(cfg_get(cfg, "token_low", 4)), int(cfg_get(cfg, "token_high", 100))
    max_new = int(cfg_get(cfg, "max_new_tokens", cfg_get(cfg, "output_tokens", 64)))
    limit = cfg_get(cfg, "limit")
    num = min(num, int(limit)) if limit is not None else num
    if num < 1 or length < 1:
        raise UserError(f"workload {name}: num_requests and prompt_tokens must be >= 1")
    if not 0 <= low < high:
        raise UserError(f"workload {name}: need 0 <= token_low < token_high, got [{low}, {high})")
    rng = random.Random(f"synthetic:{seed}")
    problems = [
        Problem(i, None, [rng.randrange(low, high) for _ in range(length)], None, "none") for i in range(num)
    ]
    return Workload(name=name, problems=problems, max_new_tokens=max_new, kind="none")
