"""Workload loaders on small local data files written here (JSONL, Parquet, CSV), with the shipped configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tokenrouter.errors import UserError
from tokenrouter.evals.workloads import Problem, encode_problem, load_workload
from tokenrouter.models.tokenizer import build_char_tokenizer

CONF = Path(__file__).resolve().parents[2] / "conf"
WORKLOADS = [
    "amc23",
    "aime24",
    "aime25",
    "math500",
    "gsm8k",
    "gpqa",
    "low_effort",
    "high_effort",
    "agentic",
    "synthetic",
]


def workload_cfg(name: str, **overrides: object) -> object:
    """conf/workload/<name>.yaml with `workload.*` overrides (Hydra composition is checked separately)."""
    return OmegaConf.merge(OmegaConf.load(CONF / "workload" / f"{name}.yaml"), overrides)


def composed(name: str) -> object:
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose("config", overrides=[f"workload={name}", "workload.limit=2"]).workload


def write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".parquet":
        pd.DataFrame(rows).to_parquet(path)
    else:
        pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_config_has_the_common_keys(name: str) -> None:
    cfg = composed(name)
    for key in ("name", "path", "limit", "subset", "max_new_tokens"):
        assert key in cfg, f"{name}.yaml lacks {key}"
    assert cfg.name == name and cfg.limit == 2
    if name not in ("synthetic",):
        assert cfg.hub_id and cfg.fields


def test_effort_budgets() -> None:
    assert workload_cfg("low_effort").max_new_tokens == 2048
    assert workload_cfg("high_effort").max_new_tokens == 8192
    assert (
        workload_cfg("agentic").max_new_tokens == 1024 and workload_cfg("agentic").max_prompt_tokens == 8192
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv"])
def test_math_loader_each_format(tmp_path: Path, suffix: str) -> None:
    rows = [{"question": f"What is {i}+{i}?", "answer": 2 * i, "url": "x"} for i in range(5)]
    path = write(tmp_path / f"amc{suffix}", rows)
    w = load_workload(workload_cfg("amc23", path=str(path), limit=3))
    assert (w.name, w.kind, w.max_new_tokens, len(w.problems)) == ("amc23", "math", 8192, 3)
    p = w.problems[2]
    assert p.answer == "4" and p.kind == "math" and p.prompt_ids is None
    assert p.messages[-1]["role"] == "user"
    assert p.messages[-1]["content"].startswith("What is 2+2?") and "\\boxed{}" in p.messages[-1]["content"]


def test_gsm8k_answer_after_marker(tmp_path: Path) -> None:
    path = write(tmp_path / "gsm.jsonl", [{"question": "q", "answer": "3 * 4 = 12\n#### 1,200"}])
    assert load_workload(workload_cfg("gsm8k", path=str(path))).problems[0].answer == "1200"


def test_indices_select_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "aime.jsonl", [{"problem": f"p{i}", "answer": str(i)} for i in range(6)])
    w = load_workload(workload_cfg("high_effort", path=str(path), indices=[4, 1]))
    assert [p.answer for p in w.problems] == ["4", "1"] and [p.index for p in w.problems] == [0, 1]
    with pytest.raises(UserError, match=r"indices \[9\] out of range"):
        load_workload(workload_cfg("high_effort", path=str(path), indices=[9]))


def test_missing_field_names_field_and_file(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", [{"question": "q", "solution": "s"}])
    with pytest.raises(UserError) as err:
        load_workload(workload_cfg("amc23", path=str(path)))
    message = str(err.value)
    assert "'answer'" in message and str(path) in message and "\n" not in message


def test_missing_file_and_bad_format(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_workload(workload_cfg("math500", path=str(tmp_path / "nope.jsonl")))
    bad = tmp_path / "data.txt"
    bad.write_text("x")
    with pytest.raises(UserError, match="unsupported format"):
        load_workload(workload_cfg("math500", path=str(bad)))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "a", "answer": "1"}\n{oops\n')
    with pytest.raises(UserError, match="broken.jsonl:2: invalid JSON"):
        load_workload(workload_cfg("math500", path=str(broken)))


def test_gpqa_options_shuffled_by_seed(tmp_path: Path) -> None:
    rows = [
        {
            "Question": f"Q{i}?",
            "Correct Answer": f"right{i}",
            "Incorrect Answer 1": f"wrong{i}a",
            "Incorrect Answer 2": f"wrong{i}b",
            "Incorrect Answer 3": f"wrong{i}c",
        }
        for i in range(12)
    ]
    path = write(tmp_path / "gpqa.parquet", rows)
    w0 = load_workload(workload_cfg("gpqa", path=str(path)), seed=0)
    assert w0.kind == "choice"
    for p in w0.problems:
        text = p.messages[-1]["content"]
        assert f"{p.answer}) right{p.index}" in text  # the gold letter labels the correct option
        assert all(f"{letter}) " in text for letter in "ABCD")
    letters0 = [p.answer for p in w0.problems]
    assert len(set(letters0)) > 1  # the correct option is not always in the same place
    assert letters0 == [
        p.answer for p in load_workload(workload_cfg("gpqa", path=str(path)), seed=0).problems
    ]
    assert letters0 != [
        p.answer for p in load_workload(workload_cfg("gpqa", path=str(path)), seed=1).problems
    ]
    # a limit does not change the options of the problems it keeps
    assert [
        p.answer for p in load_workload(workload_cfg("gpqa", path=str(path), limit=4), seed=0).problems
    ] == letters0[:4]


def _trajectory(turns: int, size: int) -> list[dict]:
    msgs = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug in foo.py"},
    ]
    for t in range(turns):
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": f"step {t} " + "a" * size}]})
        msgs.append({"role": "tool", "content": f"output {t} " + "b" * size})
    msgs.append({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "submit"}}]})
    return msgs


def test_agentic_jsonl_and_prompt_cap(tmp_path: Path) -> None:
    rows = [{"messages": json.dumps(_trajectory(20, 40))}, {"messages": _trajectory(2, 5)}]
    path = write(tmp_path / "traj.jsonl", rows)
    w = load_workload(workload_cfg("agentic", path=str(path), max_prompt_tokens=600))
    assert (w.kind, w.max_new_tokens, len(w.problems)) == ("none", 1024, 2)
    long, short = w.problems
    assert long.messages[-1]["role"] == "tool" and long.messages[1]["content"] == "Fix the bug in foo.py"
    assert long.messages[2]["content"].startswith("step 0 ")  # text parts joined
    tok = build_char_tokenizer()
    ids = encode_problem(long, tok)
    assert 400 < len(ids) <= 600  # oldest middle turns dropped to fit, not far below the cap
    text = tok.decode(ids)
    assert "Fix the bug in foo.py" in text and "output 19" in text and "step 0 " not in text
    assert text.endswith("<|im_start|>assistant\n")
    assert len(encode_problem(short, tok)) < 600 and "output 1 " in tok.decode(encode_problem(short, tok))


def test_agentic_bad_messages(tmp_path: Path) -> None:
    path = write(tmp_path / "traj.jsonl", [{"messages": "not json"}])
    with pytest.raises(UserError, match="row 0: messages are not valid JSON"):
        load_workload(workload_cfg("agentic", path=str(path)))


def test_synthetic_seeded_ids_in_safe_range() -> None:
    w = load_workload(workload_cfg("synthetic", num_requests=5, prompt_tokens=50, output_tokens=9), seed=3)
    assert (len(w.problems), w.max_new_tokens, w.kind) == (5, 9, "none")
    ids = [t for p in w.problems for t in p.prompt_ids]
    assert all(4 <= t < 100 for t in ids) and len(set(ids)) > 20
    again = load_workload(
        workload_cfg("synthetic", num_requests=5, prompt_tokens=50, output_tokens=9), seed=3
    )
    other = load_workload(
        workload_cfg("synthetic", num_requests=5, prompt_tokens=50, output_tokens=9), seed=4
    )
    assert [p.prompt_ids for p in again.problems] == [p.prompt_ids for p in w.problems]
    assert [p.prompt_ids for p in other.problems] != [p.prompt_ids for p in w.problems]
    # valid for the char tokenizer: decodes to text without special tokens
    tok = build_char_tokenizer()
    assert encode_problem(w.problems[0], tok) == w.problems[0].prompt_ids and "<|" not in tok.decode(ids)


def test_encode_chat_and_sim_tokenizer() -> None:
    tok = build_char_tokenizer()
    p = Problem(0, [{"role": "user", "content": "1+1?"}], None, "2", "math")
    assert tok.decode(encode_problem(p, tok)) == "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(UserError, match="needs the entry model's tokenizer"):
        encode_problem(p, None)


def test_arith_registered_and_unknown_loader() -> None:
    w = load_workload(OmegaConf.create({"name": "arith", "num_problems": 3}), seed=0)
    assert len(w.problems) == 3 and w.kind == "math"
    with pytest.raises(UserError, match="workload x: unknown workload loader 'nope'; known: agentic, arith, choice, math, synthetic;"):
        load_workload(OmegaConf.create({"name": "x", "loader": "nope"}))
    with pytest.raises(UserError, match="workload x: workload loader 'tokenrouter.evals.nope:f': no module 'tokenrouter.evals.nope'"):
        load_workload(OmegaConf.create({"name": "x", "loader": "tokenrouter.evals.nope:f"}))
    # a user loader named by its import path in the YAML
    own = load_workload(
        OmegaConf.create({"name": "mine", "loader": "tokenrouter.evals.loaders:load_synthetic", "limit": 2})
    )
    assert (own.name, len(own.problems)) == ("mine", 2)


def test_hub_offline_error_is_one_line() -> None:
    """Without the Hub, the default path fails fast with one line suggesting workload.path."""
    code = (
        "from omegaconf import OmegaConf\n"
        "from tokenrouter.evals.workloads import load_workload\n"
        "from tokenrouter.errors import UserError\n"
        "cfg = OmegaConf.load('conf/workload/amc23.yaml')\n"
        "try:\n    load_workload(cfg)\nexcept UserError as e:\n    print('ERR', e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=CONF.parent, env=env, capture_output=True, text=True, timeout=120
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ERR")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert "math-ai/amc23" in lines[0] and "workload.path=FILE" in lines[0]


@pytest.mark.parametrize("streaming", [False, True])
def test_hub_path_through_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streaming: bool) -> None:
    """The Hub code path, fed a local dataset folder (which `datasets.load_dataset` accepts like a Hub id)."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    (tmp_path / "ds").mkdir()
    write(tmp_path / "ds" / "test.jsonl", [{"problem": f"p{i}", "answer": i} for i in range(5)])
    cfg = workload_cfg(
        "math500", hub_id=str(tmp_path / "ds"), split="test", indices=[3, 1], streaming=streaming
    )
    w = load_workload(cfg)
    assert [p.answer for p in w.problems] == ["3", "1"] and w.problems[0].messages[-1]["content"].startswith(
        "p3"
    )


@pytest.mark.parametrize("name", ["synthetic", "arith"])
def test_path_on_a_generated_workload_is_refused(name: str, tmp_path: Path) -> None:
    data = write(tmp_path / "data.jsonl", [{"problem": "1+1", "answer": "2"}])
    with pytest.raises(UserError, match=f"workload.path is not used by workload {name} .*{data}"):
        load_workload(workload_cfg(name, path=str(data)))
    assert load_workload(workload_cfg(name, path=None)).problems  # unset: fine


def test_directory_path_says_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"workload.path {tmp_path} is a directory, expected a file"):
        load_workload(workload_cfg("math500", path=str(tmp_path)))
