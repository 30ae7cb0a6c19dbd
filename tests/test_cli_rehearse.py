"""`tokenrouter rehearse`: a GPU experiment's jobs run on this CPU through bench's code path with stand-ins,
one line per job; `plan` and `rehearse` refuse the same jobs (tokenrouter/evals/preconditions.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from tokenrouter.algorithms.checkpoints import load_official, save_official
from tokenrouter.algorithms.routers import build_router
from tokenrouter.cli import main
from tokenrouter.errors import UserError
from tokenrouter.evals.preconditions import start_problems
from tokenrouter.evals.stand_in_data import needs_stand_in, write_stand_in_rows
from tokenrouter.evals.workloads import load_workload
from tokenrouter.models.stand_in import kv_heads_for, model_type, stand_in_path

HAS_SGLANG = importlib.util.find_spec("sglang") is not None


def _job_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("job ")]


def test_rehearse_a_gpu_pair_on_cpu(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # Table 3's first pair, lock-step and TokenRouter, the large model at tp 2 (torch TP over gloo here)
    code = main(["rehearse", "-m", "+experiment=table3", "models=qwen3-0.6b-8b", "models.engine=torch",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    lines = _job_lines(out)
    assert code == 0, out
    assert len(lines) == 2 and all(" REHEARSED: " in ln for ln in lines), lines
    table = pd.read_csv(tmp_path / "results.csv")
    assert sorted(table["system"]) == ["lockstep", "tokenrouter"] and (table["status"] == "ok").all()
    assert (table["num_requests"] == 2).all() and (table["mean_output_tokens"] <= 8).all()
    assert (table["tp"] == "1/2").all() and (table["workload"] == "low_effort").all()
    summary = json.loads((tmp_path / "1" / "summary.json").read_text())
    assert summary["config"]["algorithm"]["router"].endswith("router.pt")  # the stand-in, official layout


@pytest.mark.skipif(HAS_SGLANG, reason="checks the refusal in an environment without SGLang")
def test_plan_and_rehearse_refuse_the_same_jobs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["rehearse", "-m", "+experiment=table3", "models=qwen3-0.6b-8b", "--out", str(tmp_path)])
    lines = _job_lines(capsys.readouterr().out)
    assert code == 1 and len(lines) == 2 and all(" FAILED plan: engine sglang needs sglang" in ln for ln in lines)
    # plan for a node described by --gpus: that node's environment must have it, so a note, not a refusal;
    # for this machine's devices, the same one line as rehearse
    assert main(["plan", "-m", "+experiment=table3", "models=qwen3-0.6b-8b", "--gpus", "8",
                 "--gpu-memory-gib", "80"]) == 0
    assert "note: engine sglang needs sglang" in capsys.readouterr().out
    assert main(["plan", "models=tiny-sglang"]) == 2  # a CPU set, planned for this machine
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "job 0 cannot run: engine sglang needs sglang" in err[0]


def test_start_problems_are_pure_functions_of_the_config() -> None:
    def cfg(system: str, algorithm: str, engine: str, tp: int) -> object:
        members = [{"name": "small", "source": "Qwen/Qwen3-0.6B", "engine": engine, "device": "cuda:0", "tp": tp},
                   {"name": "large", "source": "Qwen/Qwen3-8B", "engine": engine, "device": "cuda:2"}]
        return OmegaConf.create({"system": {"name": system}, "algorithm": {"name": algorithm, "router": "r.pt"},
                                 "models": {"name": "pair", "members": members}})

    assert start_problems(here=False, cfg=cfg("tokenrouter", "r2r", "torch", 2)) == []
    unnamed = cfg("tokenrouter", "citer", "torch", 1)
    unnamed.algorithm.router = None
    assert "routes by a trained router and none is named" in start_problems(unnamed, here=False)[0]
    assert start_problems(here=False, cfg=cfg("tokenrouter", "r2r", "sglang", 1)) == []  # a node's own packages
    if not torch.cuda.is_available():  # on this machine: its devices (and packages) count too
        assert "placed on cuda:0, which this machine does not have" in start_problems(cfg("tokenrouter", "r2r",
                                                                                          "torch", 1))[0]
    assert start_problems(here=False, cfg=cfg("lockstep", "r2r", "torch", 1)) == []
    problems = start_problems(here=False, cfg=cfg("tokenrouter", "r2r", "sglang", 2))
    assert any("shards over its ranks: give 'small' tp=1" in p for p in problems)
    assert not any("shards" in p for p in start_problems(here=False, cfg=cfg("tokenrouter", "citer", "sglang", 2)))
    assert not any("shards" in p for p in start_problems(here=False, cfg=cfg("lockstep", "r2r", "sglang", 1)))


def test_a_cpu_pairs_router_not_on_this_machine_gets_a_stand_in(tmp_path: Path) -> None:
    # sglang_baselines runs the local (CPU) pair with the router a user trained: the rehearsal stands one in
    from tokenrouter.cli.rehearse import stand_in_overrides

    members = [{"name": "small", "source": "tiny:small", "device": "cpu"},
               {"name": "large", "source": "tiny:large", "device": "cpu"}]
    cfg = OmegaConf.create({"system": {"name": "tokenrouter"}, "algorithm": {"name": "r2r", "router": "runs/gone"},
                            "models": {"name": "tiny", "members": members}, "workload": {"name": "arith"}})
    overrides = stand_in_overrides(cfg, tmp_path, requests=2, tokens=8)
    assert f"algorithm.router={tmp_path / 'router.pt'}" in overrides
    assert not any(o.startswith("++models.members") for o in overrides)  # the CPU members run as they are
    cfg.algorithm.router = str(tmp_path / "router.pt")  # on disk now: used as it is
    assert not any(o.startswith("algorithm.router") for o in stand_in_overrides(cfg, tmp_path, 2, 8))


def test_an_sglang_member_at_tp2_is_rehearsed_at_tp1_and_its_line_says_so(tmp_path: Path) -> None:
    from tokenrouter.cli.rehearse import cpu_cannot_run, note, stand_in_overrides

    members = [{"name": "small", "source": "Qwen/Qwen3-0.6B", "engine": "sglang", "device": "cuda:0"},
               {"name": "large", "source": "Qwen/Qwen3-8B", "engine": "sglang", "device": "cuda:0", "tp": 2}]
    cfg = OmegaConf.create({"system": {"name": "lockstep"}, "algorithm": {"name": "stay"},
                            "models": {"name": "pair", "members": members}, "workload": {"name": "arith"}})
    assert cpu_cannot_run(cfg) is None  # everything runs; only the TP collectives differ
    overrides = stand_in_overrides(cfg, tmp_path, requests=2, tokens=8)
    assert "++models.members.1.tp=1" in overrides and "++models.members.0.tp=1" not in overrides
    assert note(cfg) == "(the sglang engine at tp 1 on CPU for large at tp=2: SGLang's TP collectives need CUDA)"
    cfg.models.members[1].engine = "torch"  # the torch engine's TP runs here over gloo, as it is
    assert note(cfg) == "" and "++models.members.1.tp=1" not in stand_in_overrides(cfg, tmp_path, 2, 8)


def test_stand_in_models_keep_the_architecture() -> None:
    from transformers import AutoConfig

    assert model_type("Qwen/Qwen3-8B") == "qwen3"
    assert model_type("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B") == "qwen2"
    with pytest.raises(UserError, match="no stand-in for model 'org/unknown'"):
        model_type("org/unknown")
    assert [kv_heads_for(tp) for tp in (1, 2, 4, 8)] == [2, 2, 4, 8]
    path = stand_in_path("qwen2", tp=4)
    config = AutoConfig.from_pretrained(path)
    assert config.model_type == "qwen2" and config.num_key_value_heads == 4 and config.num_attention_heads % 4 == 0
    assert model_type(str(path)) == "qwen2"  # read from its own config.json


@pytest.mark.parametrize("workload", ["amc23", "gpqa", "agentic", "gsm8k"])
def test_stand_in_rows_load_through_the_real_loader(workload: str, tmp_path: Path) -> None:
    cfg = OmegaConf.load(Path(__file__).parents[1] / "conf" / "workload" / f"{workload}.yaml")
    assert needs_stand_in(cfg)
    cfg.path = str(write_stand_in_rows(cfg, 3, tmp_path / "rows.jsonl"))
    loaded = load_workload(cfg)
    assert len(loaded.problems) == 3 and not needs_stand_in(cfg)


def test_official_router_layout_round_trips(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = build_router("r2r", {"hidden_states_size": 32, "vocab_size": 50, "hidden_dims": [16], "logits_size": 8})
    net.eval()
    path = save_official(net, tmp_path / "router.pt", threshold=0.3)
    loaded = load_official(path, net.token_embeddings.weight.detach())
    loaded.net.eval()
    hidden, tokens, logits = torch.randn(4, 32), torch.randint(0, 50, (4,)), torch.randn(4, 50)
    assert loaded.threshold == 0.3
    assert torch.equal(loaded.net.score(hidden, tokens, logits), net.score(hidden, tokens, logits))


# every shipped experiment but the demo (`tokenrouter demo` trains its router first; its --smoke test runs it),
# on the torch engine where SGLang is absent
# the CPU studies run as they are, by their own targets (make demo, make official-cpu), not rehearsed
CPU_STUDIES = {"demo", "official_cpu", "official_cpu_ensemble"}
EXPERIMENTS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "experiment").glob("*.yaml")
                     if p.stem not in CPU_STUDIES)


# experiments on sets whose members name their own engines (sim-r2r, tiny): they run as they are
ENGINE_FIXED = {"systems_sim", "threshold_validation", "tp_sweep_cpu", "sglang_baselines"}
# what a user adds to these experiments' commands (a router trained on the cluster: not on this machine, so
# the rehearsal stands one in)
ADDED = {"pareto_amc23_citer": ["algorithm.router=routers/citer.safetensors"],
         "pareto_amc23_co_llm": ["algorithm.router=routers/co_llm.safetensors"],
         "sglang_baselines": ["++models.routers.r2r=runs/router-tiny"]}  # as its config's comment says


@pytest.mark.rehearsal
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_shipped_experiment_rehearses(experiment: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    engine = [] if HAS_SGLANG or experiment in ENGINE_FIXED else ["models.engine=torch"]
    added = ADDED.get(experiment, [])
    if experiment in ("sglang_baselines",) and not HAS_SGLANG:
        pytest.skip(f"{experiment} runs SGLang servers: rehearsed from .venv-sglang")
    code = main(["rehearse", "-m", f"+experiment={experiment}", *engine, *added, "--out", str(tmp_path / "sweep")])
    out = capsys.readouterr().out
    lines = _job_lines(out)
    print(out)
    assert code == 0 and lines and not [ln for ln in lines if " FAILED " in ln], lines


def test_official_r2r_jobs_say_what_they_need_when_its_environment_is_absent(tmp_path: Path, monkeypatch,
                                                                            capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)  # no .venv-r2r/R2R here, and no `r2r` in this environment
    code = main(["rehearse", "+experiment=table3", "models=qwen3-0.6b-8b", "system=official_r2r",
                 "--out", str(tmp_path / "out")])
    lines = _job_lines(capsys.readouterr().out)
    assert code == 0 and len(lines) == 1
    assert "NOT REHEARSED thu-nics/R2R's own server: its environment is not on this machine" in lines[0]


R2R_COPY = Path(__file__).resolve().parents[1] / ".venv-r2r" / "R2R"


@pytest.mark.slow
@pytest.mark.skipif(not R2R_COPY.is_dir(), reason="R2R's environment not built: make official-venv")
def test_official_r2r_job_rehearses_on_cpu_with_its_own_server(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # Table 3's pair with the official server: stand-ins of the Qwen3 pair, a stand-in router in its layout
    code = main(["rehearse", "+experiment=table3", "models=qwen3-0.6b-8b", "system=official_r2r",
                 f"system.repo={R2R_COPY}", "--out", str(tmp_path)])
    lines = _job_lines(capsys.readouterr().out)
    assert code == 0, lines
    assert len(lines) == 1 and " REHEARSED (the official server at tp 1 on CPU" in lines[0], lines
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert summary["official_r2r"]["device"] == "cpu" and summary["errors"] == 0
