"""`system=official_ensemble`: the set-up's refusals and weights, the draws it can replay, the request lines, the
worker's request handling on a stand-in engine, the process boundary against a stand-in worker, and (slow,
skipped without `.venv-ensemble` and the snapshot) the official Mixture-model-like Ensemble code itself on the
local pair."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from tokenrouter.algorithms import build_algorithm
from tokenrouter.api import RouterRequest
from tokenrouter.baselines import official_ensemble as oe
from tokenrouter.engine.base import SamplingParams
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest
from tokenrouter.system import SystemSetup

ROOT = Path(__file__).resolve().parents[2]
TINY = OmegaConf.load(ROOT / "conf" / "models" / "tiny.yaml")
SNAPSHOT = oe.resolve(oe.DEFAULT_REPO)
VENV_PYTHON = oe.resolve(oe.DEFAULT_PYTHON)


def _setup(algorithm: dict | None = None, models: Any = None, **system: Any) -> SystemSetup:
    cfg = OmegaConf.create({"models": models if models is not None else OmegaConf.to_container(TINY),
                            "algorithm": algorithm or {"name": "ensemble", "weights": [3, 1]},
                            "system": {"name": "official_ensemble", **system}, "seed": 0})
    return SystemSetup.from_config(cfg)


def _fake_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "me"
    (repo / "src").mkdir(parents=True, exist_ok=True)
    (repo / "src" / "ray_engine.py").write_text("# stand-in\n")
    return repo


def _raises_one_line(setup: SystemSetup, match: str) -> str:
    with pytest.raises(UserError, match=match) as err:
        oe.from_setup(setup)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_config_as_shipped_is_what_from_setup_reads() -> None:
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "system" / "official_ensemble.yaml"))
    assert isinstance(cfg, dict) and cfg["name"] == "official_ensemble"
    assert set(cfg) - {"name"} == oe.KNOWN
    assert cfg["repo"] == oe.DEFAULT_REPO and cfg["python"] == oe.DEFAULT_PYTHON and cfg["method"] == "me"
    assert (cfg["actors"], cfg["draws"], cfg["reseed"]) == (oe.ACTORS[0], oe.DRAWS[0], oe.RESEED[0])
    assert oe.resolve(cfg["repo"]) == ROOT.parent / "shared" / "third_party" / "mixture-model-like-ensemble-cbe532b"
    assert oe.resolve("/abs/python") == Path("/abs/python")


def test_refuses_in_one_line_without_the_snapshot_or_its_venv(tmp_path: Path) -> None:
    msg = _raises_one_line(_setup(repo=str(tmp_path / "nowhere")), "no Mixture-model-like Ensemble code at")
    assert str(tmp_path / "nowhere") in msg
    repo = _fake_repo(tmp_path)
    msg = _raises_one_line(_setup(repo=str(repo), python=str(tmp_path / "py")), "no Python interpreter at")
    assert "scripts/official_ensemble_env.sh" in msg


def test_weights_come_from_the_ensemble_algorithm(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path)
    py = sys.executable
    assert oe.from_setup(_setup(repo=str(repo), python=py)).info.weights == [0.75, 0.25]
    assert oe.from_setup(_setup({"name": "ensemble"}, repo=str(repo), python=py)).info.weights == [0.5, 0.5]
    assert oe.from_setup(_setup(repo=str(repo), python=py, weights=[0.75, 0.25])).info.weights == [0.75, 0.25]
    assert oe.from_setup(_setup({"name": "stay"}, repo=str(repo), python=py, weights=[1, 1])).info.weights == [0.5, 0.5]
    _raises_one_line(_setup(repo=str(repo), python=py, weights=[0.5, 0.5]), "differ from algorithm.weights")
    _raises_one_line(_setup({"name": "stay"}, repo=str(repo), python=py), "neither is set")
    _raises_one_line(_setup(repo=str(repo), python=py, weights=[1, 1, 1]), "one weight >= 0 per model")


def test_refuses_unknown_fields_and_values(tmp_path: Path) -> None:
    repo, py = str(_fake_repo(tmp_path)), sys.executable
    _raises_one_line(_setup(repo=repo, python=py, weight=[1, 1]), "unknown field")
    _raises_one_line(_setup(repo=repo, python=py, method="ce_parallel"), "system.method must be one of")
    _raises_one_line(_setup(repo=repo, python=py, actors="one"), "system.actors must be one of")
    _raises_one_line(_setup(repo=repo, python=py, draws="mine"), "system.draws must be one of")
    _raises_one_line(_setup(repo=repo, python=py, reseed="never"), "system.reseed must be one of")
    one = {"name": "tiny", "members": [OmegaConf.to_container(TINY)["members"][0]]}
    _raises_one_line(_setup(repo=repo, python=py, models=one), "needs 2\\+ models")


def test_replayed_draws_are_tokenrouters(tmp_path: Path) -> None:
    """draws=tokenrouter: the entry model first, then the ensemble's draw made after each token (as the
    runtime's reference loop in tests/runtime/test_runtime_sim.py makes them)."""
    system = oe.from_setup(_setup(repo=str(_fake_repo(tmp_path)), python=sys.executable, draws="tokenrouter"))
    algo = build_algorithm("ensemble", 0, ["small", "large"], {"weights": [3, 1]})
    prompt, out, want = [5, 6, 7], [], []
    model = 0
    for _ in range(40):
        want.append(model)
        out.append(9)
        model = algo.draw(RouterRequest("r", prompt, out[:-1], seed=11))
    req = GenerationRequest(prompt, max_new_tokens=40, seed=11)
    assert system.schedule(req) == want and 0 < sum(want) < 40
    assert oe.from_setup(_setup(repo=str(_fake_repo(tmp_path)), python=sys.executable)).schedule(req) is None


def test_request_lines(tmp_path: Path) -> None:
    system = oe.from_setup(_setup(repo=str(_fake_repo(tmp_path)), python=sys.executable))
    system.info.ready = {"eos_token_id": 2}
    greedy = system.request_line(GenerationRequest([1, 2], max_new_tokens=8, seed=5, index=3))
    assert greedy == {"id": 3, "prompt_ids": [1, 2], "max_new_tokens": 8, "do_sample": False, "seed": 5,
                      "schedule": None}
    sampled = system.request_line(GenerationRequest([1], 4, SamplingParams(0.7, 0.9, 10, seed=8), seed=5))
    assert (sampled["do_sample"], sampled["seed"], sampled["temperature"], sampled["top_k"], sampled["top_p"]) == \
        (True, 8, 0.7, 10, 0.9)
    assert system.request_line(GenerationRequest([1], 4, stop_token_ids=[2]))["do_sample"] is False
    with pytest.raises(UserError, match="EOS only"):
        system.request_line(GenerationRequest([1], 4, stop_token_ids=[2, 7]))
    with pytest.raises(UserError, match="min_new_tokens"):
        system.request_line(GenerationRequest([1], 4, min_new_tokens=2))
    cfg = system.worker_config(["/a", "/b"], "/tmp/r")
    assert cfg["ray"] == {"num_gpus_per_model": 0, "local_mode": False} and cfg["num_gpus"] == 0
    assert [m["weight"] for m in cfg["models"]] == [0.75, 0.25] and cfg["threads"] == 1
    assert cfg["generation"]["do_sample"] is False


def test_worker_imports_nothing_of_ours() -> None:
    """The worker runs in the official code's venv: standard library at import, its packages inside functions."""
    tree = ast.parse(oe.WORKER.read_text())
    roots = {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    roots |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "tokenrouter" not in roots, roots
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {(n.module or "").split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, top


def test_worker_serves_a_request_through_the_engines_loop() -> None:
    """serve_one on a stand-in engine: prompt ids decoded to the text its ModelRunner takes (checked to encode
    back), its RNG re-seeded or replaced by the schedule, and the recorded steps returned as JSON."""
    sys.path.insert(0, str(oe.WORKER.parent))
    try:
        import official_ensemble_worker as w
    finally:
        sys.path.remove(str(oe.WORKER.parent))
    from tokenrouter.engine.loader import load_tokenizer

    tok = load_tokenizer("tiny:small")

    class Timer:
        elapsed = 0.0

    class Engine:
        timer, steps, _rng, _t0 = Timer(), [], None, 0.0

        def generate(self, prompt: str, gen: dict) -> str:
            self.seen = (prompt, gen)
            for i in range(gen["max_gen_toks"]):
                m = self._rng.choices(range(2), [0.5, 0.5], k=1)[0]
                self.steps.append((m, [10 + i], 0.01 * (i + 1)))
            self.timer.elapsed += 0.5
            return ""

    ids = tok("<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n").input_ids
    eng = Engine()
    ans = w.serve_one(eng, tok, {"reseed": "request"}, {"id": 4, "prompt_ids": ids, "max_new_tokens": 3, "seed": 1,
                                                       "schedule": [1, 0, 1]})
    assert eng.seen == ("<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n",
                        {"max_gen_toks": 3, "do_sample": False})
    assert ans["output_ids"] == [10, 11, 12] and ans["models"] == [1, 0, 1] and ans["finish_reason"] == "length"
    assert ans["token_s"] == [0.01, 0.02, 0.03] and ans["engine_s"] == 0.5
    again = w.serve_one(eng, tok, {"reseed": "request"}, {"id": 5, "prompt_ids": ids, "max_new_tokens": 4, "seed": 1})
    third = w.serve_one(eng, tok, {"reseed": "request"}, {"id": 6, "prompt_ids": ids, "max_new_tokens": 4, "seed": 1})
    assert again["models"] == third["models"]  # re-seeded per request: the same seed draws the same models
    spelled = [tok.convert_tokens_to_ids(c) for c in "<|im_end|>"]  # its text encodes back as the one special id
    bad = w.serve_one(eng, tok, {}, {"id": 7, "prompt_ids": [57, *spelled], "max_new_tokens": 1, "seed": 0})
    assert bad["id"] == 7 and "round trip (first difference at 1 of 11)" in bad["error"]


STANDIN_WORKER = r'''
import json, sys
cfg = json.loads(sys.stdin.readline())
if cfg["models"][0]["weight"] > 0.9:
    print("Traceback: boom", file=sys.stderr)
    print(json.dumps({"ready": False, "error": "ValueError: no such model"}), flush=True)
    sys.exit(1)
print(json.dumps({"ready": True, "eos_token_id": 2, "seen": cfg}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "shutdown":
        break
    if req["prompt_ids"] == [666]:
        sys.exit(3)
    n = req["max_new_tokens"]
    models = req["schedule"] or [i % 2 for i in range(n)]
    print(json.dumps({"id": req["id"], "output_ids": list(range(n)), "models": models[:n],
                      "token_s": [0.001 * (i + 1) for i in range(n)], "wall_s": 0.01, "engine_s": 0.009,
                      "finish_reason": "length"}), flush=True)
'''


def _standin(tmp_path: Path) -> Path:
    script = tmp_path / "standin_worker.py"
    script.write_text(STANDIN_WORKER)
    python = tmp_path / "python"  # run as `python WORKER`: ignores the worker path, runs the stand-in
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    python.chmod(0o755)
    return python


def test_process_boundary_against_a_stand_in_worker(tmp_path: Path) -> None:
    system = oe.from_setup(_setup(repo=str(_fake_repo(tmp_path)), python=str(_standin(tmp_path))))

    async def run() -> list:
        await system.start()
        try:
            seen = system.info.ready["seen"]
            assert seen["models"][0]["path"].endswith("small") and seen["ray"]["num_gpus_per_model"] == 0
            results = [await system.generate(GenerationRequest([1, 2], max_new_tokens=5, seed=i, index=i))
                       for i in range(2)]
            with pytest.raises(RuntimeError, match="its worker exited"):
                await system.generate(GenerationRequest([666], max_new_tokens=5))
            return results
        finally:
            await system.close()

    results = asyncio.run(run())
    for r in results:
        assert r.output_ids == [0, 1, 2, 3, 4] and r.tokens_per_model == {"small": 3, "large": 2}
        assert r.model_runs() == [["small", 1], ["large", 1], ["small", 1], ["large", 1], ["small", 1]]
        assert r.handoffs == 4 and r.first_token_s is not None and r.finish_reason == "length"
    stats = system.stats()
    assert stats["tokens_per_model"] == {"small": 6, "large": 4} and stats["token_shares"]["small"] == 0.6
    assert system.summary_extra()["official_ensemble"]["weights"] == [0.75, 0.25]


def test_start_failure_is_one_line(tmp_path: Path) -> None:
    system = oe.from_setup(_setup({"name": "ensemble", "weights": [1, 0]}, repo=str(_fake_repo(tmp_path)),
                                  python=str(_standin(tmp_path))))
    with pytest.raises(UserError, match="its engine did not start: ValueError: no such model") as err:
        asyncio.run(system.start())
    assert "\n" not in str(err.value) and system._dir is None


def test_env_script_skips_in_one_line_without_the_code(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "official_ensemble_env.sh"), str(tmp_path / "none"),
                           str(tmp_path / "venv")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.count("\n") == 1 and "skipped" in done.stdout
    assert not (tmp_path / "venv").exists()


# --- the official code itself (slow) -----------------------------------------------------------------------------
needs_official = pytest.mark.skipif(
    oe.missing(SNAPSHOT, VENV_PYTHON) is not None,
    reason=f"{oe.missing(SNAPSHOT, VENV_PYTHON)} (scripts/official_ensemble_env.sh builds it)")


def _arith(n: int, new: int) -> list[GenerationRequest]:
    from tokenrouter.engine.loader import load_tokenizer
    from tokenrouter.evals.workloads import encode_problem, load_workload

    cfg = OmegaConf.load(ROOT / "conf" / "workload" / "arith.yaml")
    cfg.limit = n
    tok = load_tokenizer("tiny:small")
    return [GenerationRequest(encode_problem(p, tok), max_new_tokens=new, seed=100 + p.index, index=p.index)
            for p in load_workload(cfg, seed=0).problems]


def _serve(system: Any, reqs: list[GenerationRequest]) -> list:
    async def run() -> list:
        await system.start()
        try:
            return [await system.generate(r) for r in reqs]
        finally:
            await system.close()

    return asyncio.run(run())


@pytest.mark.slow
@needs_official
def test_official_me_on_the_local_pair() -> None:
    """2 arith prompts x 8 tokens through the official code (its own draws): every token counted once, both
    models used, each token's model the one its engine ran for that step."""
    system = oe.from_setup(_setup({"name": "ensemble", "weights": [0.6, 0.4]}))
    results = _serve(system, _arith(2, 8))
    ready = system.info.ready
    assert ready["versions"]["transformers"].startswith("4.54") and ready["actors"] == "per_model"
    assert ready["tokenizers"] == ["PreTrainedTokenizerFast (fallback)"] and ready["same_tokenizer"]
    for r in results:
        assert r.finish_reason == "length" and len(r.output_ids) == 8
        assert sum(r.tokens_per_model.values()) == 8 == sum(n for _, n in r.model_runs())
    totals = system.stats()["tokens_per_model"]
    assert sum(totals.values()) == 16 and min(totals.values()) > 0, totals
    assert system._dir is None  # its work dir (worker log, Ray's session files) removed at close


@pytest.mark.slow
@needs_official
def test_official_me_replaying_our_draws_matches_lockstep_token_for_token() -> None:
    """draws=tokenrouter: the official loop with TokenRouter's draws gives the same greedy tokens, and the same
    model per token, as our lock-step execution of algorithm=ensemble (fp32, two transformers versions)."""
    from tokenrouter.baselines.lockstep import from_setup as lockstep

    reqs = _arith(2, 8)
    official = _serve(oe.from_setup(_setup({"name": "ensemble", "weights": [0.6, 0.4]}, draws="tokenrouter")), reqs)
    ours_setup = _setup({"name": "ensemble", "weights": [0.6, 0.4]})
    ours_setup.system = {"name": "lockstep"}
    ours = _serve(lockstep(ours_setup), reqs)
    for a, b in zip(official, ours, strict=True):
        assert a.output_ids == b.output_ids and a.model_runs() == b.model_runs(), (a, b)
        assert a.tokens_per_model == b.tokens_per_model
