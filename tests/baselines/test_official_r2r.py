"""`system=official_r2r`: set-up checks, the recorded commit / server, and one run against a stand-in server
that speaks the official HTTP interface (the official code and a GPU are not needed)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tokenrouter.baselines import official_r2r
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest
from tokenrouter.system import SystemSetup

# launch_r2r_server.py stand-in: its flags, /health and /generate; records what it was started with
FAKE_SERVER = '''
import argparse, json, os
from http.server import BaseHTTPRequestHandler, HTTPServer
p = argparse.ArgumentParser()
for flag in ("--config-path", "--host", "--threshold", "--tp-size-quick", "--tp-size-ref"):
    p.add_argument(flag)
p.add_argument("--port", type=int)
p.add_argument("--overlap-tp-schedule", action="store_true")
a = p.parse_args()
seen = {"args": vars(a), "config": json.load(open(a.config_path)), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
open("launched.json", "w").write(json.dumps(seen))
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = body["sampling_params"]["max_new_tokens"]
        out = json.dumps({"output_ids": list(range(n)), "llm_ratio": 0.25}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers()
        self.wfile.write(out)
    def log_message(self, *args):
        pass
HTTPServer((a.host, a.port), H).serve_forever()
'''


def _setup(router: Path | None = None, **system) -> SystemSetup:
    cfg = OmegaConf.create({
        "models": {"members": [{"name": "small", "source": "Qwen/Qwen3-0.6B", "device": "cuda:0"},
                               {"name": "large", "source": "Qwen/Qwen3-32B", "device": "cuda:0", "tp": 2}]},
        "algorithm": {"name": "r2r", "threshold": 0.3, "router": None if router is None else str(router)},
        "runtime": {},
        "workload": {"name": "aime24"},
        "system": {"name": "official_r2r", **system},
    })
    return SystemSetup.from_config(cfg)


def _checkout(root: Path, random_routing: bool = False, git: bool = False) -> Path:
    (root / "script/inference").mkdir(parents=True)
    (root / "script/inference/launch_r2r_server.py").write_text(FAKE_SERVER)
    (root / "config").mkdir()
    official = {"router": {"router_path": "nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt"}}
    (root / "config/Qwen3-0.6B+Qwen3-32B.yaml").write_text(json.dumps(official))
    slm = root / official_r2r.SLM_SERVER
    slm.parent.mkdir(parents=True)
    (root / official_r2r.MODEL_CONFIGS).parent.mkdir(parents=True)
    (root / official_r2r.MODEL_CONFIGS).write_text(json.dumps(official))
    line = "model_choices = torch.bernoulli(torch.full((len(batch.reqs),), 0.10))" if random_routing else ""
    slm.write_text(f"model_choices = router.route(model_outputs).cpu()\n{line}\n")
    if git:
        run = {"cwd": root, "check": True, "capture_output": True}
        subprocess.run(["git", "init", "-q"], **run)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x", "--allow-empty"], **run)
    return root


@pytest.fixture
def router(tmp_path: Path, monkeypatch) -> Path:
    """A local official-looking checkpoint; the weights-only read is recorded instead of done."""
    path = tmp_path / "routers" / "default_router.pt"
    path.parent.mkdir()
    path.write_bytes(b"x")
    checked: list[str] = []
    monkeypatch.setattr(official_r2r, "check_router", lambda p, kind: checked.append(p))
    monkeypatch.setattr(official_r2r, "saved_threshold", lambda p: None)  # none saved: the dataset default
    return path


def test_official_r2r_not_installed_is_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no .venv-r2r/R2R (make official-venv) here
    with pytest.raises(UserError, match="git clone https://github.com/thu-nics/R2R") as err:
        official_r2r.from_setup(_setup())
    assert "\n" not in str(err.value)


def test_random_routing_checkout_is_refused_unless_accepted(tmp_path: Path, router: Path) -> None:
    repo = _checkout(tmp_path / "R2R", random_routing=True)
    with pytest.raises(UserError, match="random 10% routing.*check out 14994a0"):
        official_r2r.from_setup(_setup(router, repo=str(repo), python="python3"))
    system = official_r2r.from_setup(_setup(router, repo=str(repo), python="python3", on_random_routing="accept"))
    assert "random" in system.stats()["known_issue"] and system.summary_extra()["official_r2r"]["random_routing"]
    assert system.threshold == 0.3  # algorithm.threshold (an r2r sweep) before the dataset default
    asyncio.run(system.close())


def test_thresholds_per_dataset_and_explicit_zero(tmp_path: Path, router: Path) -> None:
    repo = _checkout(tmp_path / "R2R")
    setup = _setup(router, repo=str(repo), python="python3")
    setup.algorithm.params.pop("threshold")
    assert official_r2r.from_setup(setup).threshold == pytest.approx(0.406, abs=1e-3)  # AIME
    assert official_r2r.from_setup(_setup(router, repo=str(repo), python="python3", threshold=0.0)).threshold == 0.0
    assert official_r2r.dataset_threshold("gpqa") == 0.42
    assert official_r2r.dataset_threshold("amc23") == 0.5


def test_router_must_be_an_official_checkpoint_or_ours(tmp_path: Path, router: Path) -> None:
    repo = _checkout(tmp_path / "R2R")
    other = tmp_path / "router.bin"
    other.write_text("{}")
    with pytest.raises(UserError, match="neither an official .pt checkpoint nor ours"):
        official_r2r.from_setup(_setup(other, repo=str(repo), python="python3"))
    ours = tmp_path / "ours.json"  # ours, half written: one line naming the missing half
    ours.write_text("{}")
    with pytest.raises(UserError, match="missing ours.safetensors"):
        official_r2r.from_setup(_setup(ours, repo=str(repo), python="python3"))


def test_checkout_without_its_model_configs_is_one_line(tmp_path: Path, router: Path) -> None:
    repo = _checkout(tmp_path / "R2R")
    (repo / official_r2r.MODEL_CONFIGS).unlink()
    with pytest.raises(UserError, match="no r2r/utils/model_configs.json.*copy one of its config"):
        official_r2r.from_setup(_setup(router, repo=str(repo), python="python3"))


def test_commit_is_the_checkouts_or_unknown(tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "R2R", git=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert official_r2r.official_version(repo, "python3") == head.strip()
    assert official_r2r.official_version(_checkout(tmp_path / "plain"), "python3") == "unknown"  # no r2r package


def test_run_against_the_stand_in_server_records_what_it_ran(tmp_path: Path, router: Path, monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    from tokenrouter.engine import download

    fetched: list[str] = []  # no Hub here: what would be downloaded, before the server's start-up timeout counts
    monkeypatch.setattr(download, "download", fetched.append)
    repo = _checkout(tmp_path / "R2R", git=True)
    system = official_r2r.from_setup(_setup(router, repo=str(repo), python="python3", request_timeout_s=30))

    async def run() -> list[int]:
        await system.start()
        try:
            return (await system.generate(GenerationRequest(prompt_ids=[1, 2], max_new_tokens=4))).output_ids
        finally:
            await system.close()

    assert asyncio.run(run()) == [0, 1, 2, 3]
    assert fetched == ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-32B"]
    seen = json.loads((repo / "launched.json").read_text())
    assert seen["gpus"] == "0,1" and seen["args"]["overlap_tp_schedule"] and seen["args"]["port"] == system.port
    assert seen["config"]["router"] == {"router_path": str(router), "threshold": 0.3}
    info = system.summary_extra()["official_r2r"]
    assert info["commit"] == official_r2r.official_version(repo, "python3") and info["pinned_commit"] == "14994a0"
    assert info["server"].startswith("SLDisaggregationSystem") and info["router"] == str(router)
    assert info["threshold"] == 0.3 and info["cuda_visible_devices"] == "0,1" and info["overlap_tp_schedule"]
    assert system.stats()["requests"] == 1


def test_cpu_pair_exports_our_router_in_the_official_layout_at_its_saved_threshold(tmp_path: Path) -> None:
    import torch

    from tokenrouter.algorithms.checkpoints import load_official, save_router
    from tokenrouter.algorithms.routers import build_router

    net = build_router("r2r", {"hidden_states_size": 64, "vocab_size": 100, "hidden_dims": [16], "logits_size": 100})
    weights, _ = save_router(net, tmp_path / "ours" / "router", 0.61, {})
    repo = _checkout(tmp_path / "R2R")
    cfg = OmegaConf.create({
        "models": {"members": [{"name": "small", "source": "tiny:small"}, {"name": "large", "source": "tiny:large"}]},
        "algorithm": {"name": "r2r", "threshold": None, "router": str(weights.with_suffix(".json"))},
        "runtime": {}, "workload": {"name": "arith"},
        "system": {"name": "official_r2r", "repo": str(repo), "python": "python3"},
    })
    system = official_r2r.from_setup(SystemSetup.from_config(cfg))
    try:
        config = system.launch.config
        assert system.threshold == pytest.approx(0.61) and config["router"]["threshold"] == pytest.approx(0.61)
        assert config["quick"]["model_path"].endswith("tiny_pair/small")  # written from the model set
        exported = Path(config["router"]["router_path"])
        assert exported.parent == system.launch.config_path.parent  # in the private dir, removed at close
        ckpt = torch.load(exported, weights_only=True)
        assert ckpt["init_args"]["pretrained_model_name"].endswith("tiny_pair/small")
        back = load_official(exported, torch.zeros(100, 64)).net.state_dict()
        for key, value in net.state_dict().items():
            if key != "token_embeddings.weight":
                assert torch.equal(back[key], value), key
        assert system.summary_extra()["official_r2r"]["device"] == "cpu"
    finally:
        asyncio.run(system.close())
    assert not exported.exists()
