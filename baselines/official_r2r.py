"""`system=official_r2r`: the public thu-nics/R2R implementation, run as it ships, on the same prompts.

Install (GPU machine; R2R pins torch 2.8 / transformers 4.55 / sglang 0.5.1, so it gets its own environment):
    git clone https://github.com/thu-nics/R2R && cd R2R
    python -m venv .venv && .venv/bin/pip install -e . && .venv/bin/pip install sgl-kernel==0.3.8
then `system.repo=/path/to/R2R` (and `system.python=...` if its interpreter is not `<repo>/.venv/bin/python`).

Entry point: its OpenAI-style server `script/inference/launch_r2r_server.py --config-path CONFIG --host
127.0.0.1 --port P --threshold T --tp-size-quick S --tp-size-ref L` (SLDisaggregationSystem: SLM and LLM
servers with its own scheduling), started as a subprocess in its own process group; every request goes to its
`POST /generate` with our prompt token ids, and the reply's `output_ids` and `llm_ratio` (share of tokens from
the large model) become a GenerationResult.

Known issues, and how they are handled:
- Its async runtime replaces the router's decisions with random 10% routing (`model_choices =
  torch.bernoulli(torch.full(..., 0.10))` after `router.route(...)` in r2r/models/sglang_patch/slm_server.py).
  We look for that line in the checkout: `system.on_random_routing=error` (default) refuses to run it,
  `accept` runs it and flags the run (stats.known_issue), so its numbers are never mistaken for R2R routing.
- Greedy only: a request with temperature > 0 is rejected.
- Thresholds are per dataset (its script/evaluate/eval_configs/r2r_configs.json): AIME 0.406, GPQA 0.42, else
  its CLI default 0.5. Precedence here: system.threshold, then algorithm.threshold (r2r sweeps), then the
  workload's dataset default. Its server lets a `router.threshold` in the config file override the CLI flag,
  so we pass a private copy of its config with our threshold written in.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError
from tokenrouter.results import GenerationRequest, GenerationResult

SERVER_SCRIPT = "script/inference/launch_r2r_server.py"
RANDOM_ROUTING = re.compile(r"model_choices\s*=\s*torch\.bernoulli\(\s*torch\.full\(")
SLM_SERVER = "r2r/models/sglang_patch/slm_server.py"
DATASET_THRESHOLDS = {"aime": 0.40595959595959596, "low_effort": 0.40595959595959596,
                      "high_effort": 0.40595959595959596, "gpqa": 0.42}
DEFAULT_THRESHOLD = 0.5


def dataset_threshold(workload: str) -> float:
    """R2R's threshold for a workload: by dataset prefix (aime24 -> aime), else its CLI default."""
    for prefix, value in DATASET_THRESHOLDS.items():
        if workload.startswith(prefix):
            return value
    return DEFAULT_THRESHOLD


def config_name(models: list[ModelSpec]) -> str:
    """R2R's config file name for a model pair: config/<small>+<large>.yaml from the Hub ids' basenames."""
    return "+".join(Path(m.source.rstrip("/")).name for m in models) + ".yaml"


class OfficialR2R:
    """The thu-nics/R2R server as a ServingSystem (see the module docstring)."""

    def __init__(self, models: list[ModelSpec], repo: Path, python: str, config: Path, threshold: float, *,
                 port: int = 30000, tp_small: int = 1, tp_large: int = 2, startup_timeout_s: float = 1800.0,
                 random_routing: bool = False) -> None:
        self.model_names = [m.name for m in models]
        self.repo, self.python, self.config, self.threshold = repo, python, config, threshold
        self.port, self.tp = port, (tp_small, tp_large)
        self.startup_timeout_s = startup_timeout_s
        self.random_routing = random_routing
        self._proc: subprocess.Popen | None = None
        self._dir: Path | None = None
        self._client: Any = None
        self._served = 0

    async def start(self) -> None:
        import httpx

        self._dir = Path(tempfile.mkdtemp(prefix="tokenrouter-r2r-"))
        os.chmod(self._dir, 0o700)
        cfg = json.loads(self.config.read_text())
        cfg.setdefault("router", {})["threshold"] = self.threshold
        private = self._dir / "config.yaml"
        private.write_text(json.dumps(cfg, indent=2))
        cmd = [self.python, SERVER_SCRIPT, "--config-path", str(private), "--host", "127.0.0.1",
               "--port", str(self.port), "--threshold", str(self.threshold),
               "--tp-size-quick", str(self.tp[0]), "--tp-size-ref", str(self.tp[1])]
        log = (self._dir / "server.log").open("w")
        self._proc = subprocess.Popen(cmd, cwd=self.repo, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        self._client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=None)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = (self._dir / "server.log").read_text()[-400:].strip().replace("\n", " | ")
                await self.close()
                raise UserError(f"official R2R server exited with status {self._proc.returncode}: ...{tail}")
            try:
                if (await self._client.get("/health", timeout=2.0)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(1.0)
        await self.close()
        raise UserError(f"official R2R server not healthy after {self.startup_timeout_s:.0f} s")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(self._proc.wait, 15)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                await asyncio.to_thread(self._proc.wait)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        if not req.sampling.greedy:
            raise UserError("official_r2r: the official R2R code is evaluated greedy only (temperature 0)")
        arrival = time.perf_counter()
        body = {"input_ids": list(req.prompt_ids),
                "sampling_params": {"max_new_tokens": req.max_new_tokens, "temperature": 0.0, "top_p": 1.0}}
        reply = await self._client.post("/generate", json=body)
        if reply.status_code != 200:
            raise UserError(f"official R2R server answered {reply.status_code}: {reply.text[:200]}")
        data = reply.json()
        output = [int(t) for t in data.get("output_ids", [])]
        ratio = float(data.get("llm_ratio") or 0.0)
        large = round(ratio * len(output))
        self._served += 1
        return GenerationResult(
            index=req.index, prompt_ids=list(req.prompt_ids), output_ids=output,
            finish_reason="length" if len(output) >= req.max_new_tokens else "stop",
            tokens_per_model={self.model_names[0]: len(output) - large, self.model_names[-1]: large},
            arrival_s=arrival, finish_s=time.perf_counter(), extra={"llm_ratio": ratio},
        )

    def stats(self) -> dict:
        out: dict[str, Any] = {"system": "official_r2r", "config": str(self.config), "threshold": self.threshold,
                               "requests": self._served}
        if self.random_routing:
            out["known_issue"] = "random 10% routing in slm_server.py (router decisions ignored)"
        return out


def from_setup(setup: Any) -> OfficialR2R:
    known = {"repo", "python", "config", "threshold", "port", "tp_small", "tp_large", "startup_timeout_s",
             "on_random_routing"}
    setup.unknown_fields(known)
    opts = setup.system
    if len(setup.models) != 2:
        raise UserError("system=official_r2r needs exactly two models (small, large)")
    repo = _find_repo(opts.get("repo"))
    python = opts.get("python") or str(repo / ".venv" / "bin" / "python")
    if not shutil.which(python):
        raise UserError(f"official_r2r: no Python interpreter at {python} (set system.python to R2R's environment)")
    config = Path(opts["config"]) if opts.get("config") else repo / "config" / config_name(setup.models)
    if not config.is_file():
        raise UserError(f"official_r2r: no R2R config {config} for models "
                        f"{[m.source for m in setup.models]} (set system.config)")
    random_routing = bool(RANDOM_ROUTING.search((repo / SLM_SERVER).read_text()))
    policy = opts.get("on_random_routing", "error")
    if policy not in ("error", "accept"):
        raise UserError(f"system.on_random_routing must be 'error' or 'accept', got {policy!r}")
    if random_routing and policy == "error":
        raise UserError(f"official_r2r: this R2R checkout replaces router decisions with random 10% routing "
                        f"({SLM_SERVER}); set system.on_random_routing=accept to run it anyway (flagged)")
    algo_threshold = setup.algorithm.params.get("threshold") if setup.algorithm.name == "r2r" else None
    threshold = opts.get("threshold") or algo_threshold or dataset_threshold(setup.workload_name)
    return OfficialR2R(setup.models, repo, python, config, float(threshold), port=int(opts.get("port", 30000)),
                       tp_small=int(opts.get("tp_small", 1)), tp_large=int(opts.get("tp_large", 2)),
                       startup_timeout_s=float(opts.get("startup_timeout_s", 1800)), random_routing=random_routing)


def _find_repo(repo: str | None) -> Path:
    """The R2R checkout: `system.repo`, else found from an importable `r2r` package (editable install)."""
    if repo:
        path = Path(repo).expanduser()
    else:
        try:
            import r2r  # noqa: F401 - only to locate an editable install
        except ImportError:
            raise UserError("system=official_r2r needs the thu-nics/R2R code: git clone "
                            "https://github.com/thu-nics/R2R, install it in its own environment "
                            "(see baselines/official_r2r.py) and set system.repo=PATH") from None
        path = Path(r2r.__file__).resolve().parents[1]
    if not (path / SERVER_SCRIPT).is_file() or not (path / SLM_SERVER).is_file():
        raise UserError(f"official_r2r: {path} is not a thu-nics/R2R checkout (no {SERVER_SCRIPT})")
    return path
