"""`tokenrouter generate` and `tokenrouter profile`, in process and once as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from tokenrouter.cli import main
from tokenrouter.engine.latency import LatencyProfile
from tokenrouter.engine.loader import load_model, load_tokenizer


def _hf_greedy(model, ids: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    return out[0, len(ids):].tolist()


def test_generate_json_matches_hf_generate_with_continuous_batching(tmp_path, capsys) -> None:
    tok = load_tokenizer("tiny-random:large")
    texts = ["What is 2+2?", "Hello there, how are you today?", "Hello world", "Tell me about the sea."]
    rows = [{"prompt": t} for t in texts[:3]] + [{"input_ids": tok(texts[3])["input_ids"]}]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert main(["generate", "--model", "tiny-random:large", "--prompts-file", str(prompts), "--max-new-tokens",
                 "16", "--max-batch-size", "2", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["index"] for r in lines] == [0, 1, 2, 3]
    model = load_model("tiny-random:large")
    eos = model.generation_config.eos_token_id
    for row, text in zip(lines, texts, strict=True):
        ref = _hf_greedy(model, tok(text)["input_ids"], 16)
        assert row["output_ids"] == ref
        assert row["finish_reason"] == ("stop" if ref[-1] == eos else "length")
        assert row["text"] == tok.decode(ref, skip_special_tokens=True)
    assert {r["finish_reason"] for r in lines} == {"stop", "length"}  # requests finished at different times


def test_generate_chat_and_sampling_are_reproducible(capsys) -> None:
    argv = ["generate", "--model", "tiny-random:small", "--prompt", "hi", "--prompt", "2+3=", "--chat",
            "--temperature", "0.9", "--top-k", "30", "--seed", "5", "--max-new-tokens", "8", "--json"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    assert main(argv[:-1]) == 0
    assert capsys.readouterr().out.startswith("[0] (")


def test_generate_bad_input_is_one_line_exit_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": 3}\n')
    cases = [
        (["--prompts-file", str(tmp_path / "missing.jsonl")], "prompts file not found"),
        (["--prompts-file", str(bad)], "bad.jsonl:2: expected an object"),
        (["--prompt", "x", "--max-new-tokens", "0"], "must be >= 1"),
        (["--prompt", "x", "--kv-tokens", "32", "--max-new-tokens", "40"], "exceed the KV pool"),
        (["--prompt", "x", "--dtype", "int3"], "invalid choice"),
    ]
    for extra, message in cases:
        assert main(["generate", "--model", "tiny-random:small", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    assert main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "x"]) == 2
    assert "model not found" in capsys.readouterr().err


def test_profile_writes_a_latency_profile(tmp_path, capsys) -> None:
    out = tmp_path / "prof.json"
    assert main(["profile", "--model", "tiny-random:small", "--batch-sizes", "1,4", "--context", "16",
                 "--steps", "2", "--extend-tokens", "8", "--json", "--output", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert set(printed) == {"model", "device", "dtype", "context", "decode_ms", "decode_ms_by_context",
                            "contexts_skipped", "extend_ms_per_token"}
    assert set(printed["decode_ms"]) == {"1", "4"} and printed["context"] == 16
    assert printed["decode_ms_by_context"] == {"16": printed["decode_ms"]} and printed["contexts_skipped"] == {}
    prof = LatencyProfile.from_json(out)
    assert prof.decode_ms(1) > 0 and prof.step_ms(1, 8) >= prof.decode_ms(1)
    assert main(["profile", "--model", "tiny-random:small", "--batch-sizes", "0"]) == 2
    assert main(["profile", "--model", "tiny-random:small", "--batch-sizes", "a,b"]) == 2
    assert main(["profile", "--model", "tiny-random:small", "--contexts", "0,16"]) == 2


def test_profile_at_several_contexts(capsys) -> None:
    assert main(["profile", "--model", "tiny-random:small", "--batch-sizes", "1,2", "--contexts", "64,16",
                 "--steps", "2", "--extend-tokens", "8", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["context"] == 16 and list(printed["decode_ms_by_context"]) == ["16", "64"]
    assert printed["decode_ms"] == printed["decode_ms_by_context"]["16"]
    assert all(set(t) == {"1", "2"} for t in printed["decode_ms_by_context"].values())


def test_generate_subprocess() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tokenrouter", "generate", "--model", "tiny-random:small", "--prompt", "abc",
         "--max-new-tokens", "5", "--json"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert row["index"] == 0 and 1 <= len(row["output_ids"]) <= 5
