"""The sglang engine on REAL SGLang (CPU, torch_native attention, float32) against transformers' `generate`
and our torch engine: same greedy tokens, logits and hidden states over mixed prefill + decode steps, requests
joining mid-way, a parked request resumed by a several-token extend, truncate + re-extend, release and reuse.

Skipped where SGLang is not installed (the default venv); `make test-sglang` runs it from .venv-sglang."""

from __future__ import annotations

import pytest

pytest.importorskip("sglang")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tokenrouter.config import ModelSpec  # noqa: E402
from tokenrouter.engine.base import StepItem  # noqa: E402
from tokenrouter.engine.factory import build_engine  # noqa: E402
from tokenrouter.engine.sglang_engine import SGLangEngine  # noqa: E402
from tokenrouter.engine.torch_engine import TorchEngine  # noqa: E402
from tokenrouter.errors import CapacityError, UserError  # noqa: E402
from tokenrouter.models.tiny_random import save_random_decoder  # noqa: E402

from .schedules import staggered_parked_schedule  # noqa: E402

NEW = 10
PROMPTS = [[5, 17, 33], [2, 9, 40, 41, 7, 3, 88], [60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 12], [44, 8, 19, 90, 1]]
KV_TOKENS = 512


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def engines(request, tmp_path_factory):
    """(sglang engine, torch engine, HF model, greedy references) on one random model saved to disk."""
    path = save_random_decoder(tmp_path_factory.mktemp(request.param), request.param, seed=7)
    hf = AutoModelForCausalLM.from_pretrained(path).eval()
    refs = [hf.generate(torch.tensor([p]), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                        eos_token_id=None)[0, len(p):].tolist() for p in PROMPTS]
    spec = ModelSpec(name=request.param, source=str(path), engine="sglang", kv_tokens=KV_TOKENS)
    sgl = build_engine(spec)
    assert isinstance(sgl, SGLangEngine)
    ref_engine = TorchEngine.from_spec(ModelSpec(name="torch", source=str(path), kv_tokens=KV_TOKENS, page_size=4))
    yield sgl, ref_engine, hf, refs
    sgl.close()


def test_greedy_equals_hf_generate_and_torch_engine_over_mixed_staggered_parked_steps(engines) -> None:
    sgl, ref_engine, _, refs = engines
    torch_steps = []
    staggered_parked_schedule(ref_engine, PROMPTS, refs, NEW, lambda step, items, res: torch_steps.append(res))
    kinds = set()

    def check(step, items, res) -> None:
        kinds.add("decode" if all(len(it.token_ids) == 1 for it in items) else "mixed")
        want = torch_steps[step]
        assert res.rids == want.rids and res.next_tokens == want.next_tokens
        assert res.logits.dtype == torch.float32 and res.logits.shape == (len(items), sgl.vocab_size)
        assert res.hidden.shape == (len(items), sgl.hidden_size)
        torch.testing.assert_close(res.logits, want.logits, atol=1e-3, rtol=1e-4)
        torch.testing.assert_close(res.hidden, want.hidden, atol=1e-4, rtol=1e-4)

    out = staggered_parked_schedule(sgl, PROMPTS, refs, NEW, check)
    assert kinds == {"decode", "mixed"}  # both ForwardMode.DECODE and EXTEND steps ran
    for r in out:
        assert out[r][:NEW] == refs[int(r)], f"request {r}"
        assert sgl.seq_len(r) == len(PROMPTS[int(r)]) + NEW - 1
        sgl.release(r)
        ref_engine.release(r)
    assert sgl.tokens_used() == 0 and sgl.tokens_free() == KV_TOKENS


def test_hidden_is_the_last_hidden_state_after_the_final_norm(engines) -> None:
    sgl, _, hf, refs = engines
    seq = PROMPTS[1] + refs[1][:3]
    sgl.step([StepItem("h", seq[:-3])])
    res = sgl.step([StepItem("h", seq[-3:])])
    with torch.no_grad():
        base = hf.get_decoder()(torch.tensor([seq])).last_hidden_state[0, -1]
    torch.testing.assert_close(res.hidden[0], base, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(res.logits[0], hf.lm_head(base), atol=1e-3, rtol=1e-4)
    emb = sgl.input_embeddings()
    torch.testing.assert_close(emb(torch.tensor(seq)), hf.get_input_embeddings()(torch.tensor(seq)))
    sgl.release("h")


def test_truncate_then_re_extend_regenerates_the_same_tokens(engines) -> None:
    sgl, _, _, refs = engines
    prompt = PROMPTS[2]
    first = sgl.step([StepItem("t", prompt)]).next_tokens[0]
    seq = prompt + refs[2][:6]
    sgl.step([StepItem("t", seq[len(prompt):])])
    assert sgl.seq_len("t") == len(seq) and sgl.tokens_used() == len(seq)
    sgl.truncate("t", len(prompt) - 1)  # back into the prompt: its last token again
    assert sgl.seq_len("t") == len(prompt) - 1 and sgl.tokens_free() == KV_TOKENS - (len(prompt) - 1)
    assert sgl.step([StepItem("t", prompt[-1:])]).next_tokens == [first]
    assert sgl.step([StepItem("t", refs[2][:5])]).next_tokens == [refs[2][5]]
    sgl.truncate("t", 0)
    assert sgl.seq_len("t") == 0 and sgl.tokens_used() == 0


def test_released_kv_is_reused_and_outputs_stay_exact(engines) -> None:
    sgl, _, _, refs = engines
    for round_ in range(3):  # each round takes most of the pool, so later rounds run on recycled slots
        rids = [f"r{round_}-{i}" for i in range(40)]
        res = sgl.step([StepItem(r, PROMPTS[i % 4]) for i, r in enumerate(rids)])
        assert res.next_tokens == [refs[i % 4][0] for i in range(40)]
        res = sgl.step([StepItem(r, [refs[i % 4][0]]) for i, r in enumerate(rids)])  # an all-decode step
        assert res.next_tokens == [refs[i % 4][1] for i in range(40)]
        assert sgl.tokens_used() == sum(len(PROMPTS[i % 4]) + 1 for i in range(40))
        for r in rids:
            sgl.release(r)
        assert sgl.tokens_used() == 0 and sgl.tokens_free() == KV_TOKENS
    sgl.release("never-seen")  # unknown ids are ignored


def test_capacity_and_bad_items_are_clear_errors_that_change_nothing(engines) -> None:
    sgl, _, _, _ = engines
    sgl.step([StepItem("a", list(range(1, 90)) * 5)])  # 445 of 512 slots
    assert sgl.can_fit("a", 67) and not sgl.can_fit("a", 68) and not sgl.can_fit("b", 100)
    with pytest.raises(CapacityError, match="KV pool full"):
        sgl.step([StepItem("a", [3]), StepItem("b", list(range(1, 80)))])
    assert sgl.seq_len("a") == 445 and sgl.seq_len("b") == 0 and sgl.tokens_free() == KV_TOKENS - 445
    for bad in ([StepItem("a", [sgl.vocab_size])], [StepItem("a", [])], [StepItem("a", [1]), StepItem("a", [2])]):
        with pytest.raises(ValueError):
            sgl.step(bad)
    sgl.release("a")
    with pytest.raises(CapacityError, match="context"):
        sgl.step([StepItem("long", [1] * (sgl.max_len + 1))])
    assert sgl.tokens_used() == 0 and sgl.tokens_free() == KV_TOKENS


def test_one_live_sglang_engine_per_process(engines, tmp_path) -> None:
    sgl, _, _, _ = engines
    with pytest.raises(UserError, match="one sglang engine per process"):
        SGLangEngine(ModelSpec(name="second", source=sgl_source(sgl), engine="sglang"))


def sgl_source(engine: SGLangEngine) -> str:
    return str(engine.runner.model_config.model_path)


MIRROR = r"""
import json, sys
from tokenrouter.config import ModelSpec
from tokenrouter.engine.factory import build_engine
from tokenrouter.engine.tp import apply_command
engine = build_engine(ModelSpec.from_dict(json.loads(sys.argv[1])))
for command in json.loads(sys.argv[2]):
    apply_command(engine, command)
rows = {rid: [row, engine.rows.req_to_token[row, :engine.seq_len(rid)].tolist()] for rid, row in engine._row.items()}
print(json.dumps({"rows": rows, "free": engine.tokens_free(), "free_rows": int(engine.rows.available_size())}))
"""


def test_ranks_given_the_same_commands_hold_the_same_requests_rows_and_slots(tmp_path) -> None:
    """What TP on the sglang engine rests on, where CPU can run it: every rank applies rank 0's broadcast
    commands (tp.apply_command, as tp_worker does), and two engines in two processes fed one command sequence
    (prefills, decodes, a truncate, a release and reuse, an extend) end with the same request rows, the same
    KV slot ids per token and the same free counts. SGLang's collectives themselves need CUDA."""
    import json
    import subprocess
    import sys

    from tokenrouter.engine.tp import RELEASE, STEP, TRUNCATE, items_to_wire

    path = save_random_decoder(tmp_path, "qwen3", seed=3)
    spec = ModelSpec(name="mirror", source=str(path), engine="sglang", kv_tokens=KV_TOKENS)
    commands = [
        [STEP, items_to_wire([StepItem("a", [5, 6, 7, 8]), StepItem("b", [9, 10])])],
        [STEP, items_to_wire([StepItem("a", [1]), StepItem("b", [2]), StepItem("c", [11, 12, 13])])],
        [TRUNCATE, "a", 3],
        [RELEASE, "b"],
        [STEP, items_to_wire([StepItem("b", [1, 2, 3]), StepItem("a", [4, 5]), StepItem("c", [6])])],
    ]
    procs = [subprocess.Popen([sys.executable, "-c", MIRROR, json.dumps(spec.to_dict()), json.dumps(commands)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert outs[0] == outs[1]
    lengths = {rid: len(slots) for rid, (_, slots) in outs[0]["rows"].items()}
    assert lengths == {"a": 5, "b": 3, "c": 4} and outs[0]["free"] == KV_TOKENS - 12
