"""`system=official_r2r`: the public thu-nics/R2R implementation, run as it ships, on the same prompts.

Install (GPU machine; R2R pins torch 2.8 / transformers 4.55 / sglang 0.5.1, so it gets its own environment),
pinned to commit 14994a0, the last one whose server routes by the router (see Known issues):
    git clone https://github.com/thu-nics/R2R && cd R2R && git checkout 14994a0
    python -m venv .venv && .venv/bin/pip install -e . && .venv/bin/pip install sgl-kernel==0.3.8
then `system.repo=/path/to/R2R` (and `system.python=...` if its interpreter is not `<repo>/.venv/bin/python`).
Or `make official-venv` (any machine: scripts/official_r2r_env.sh builds .venv-r2r with a copy of the checkout,
found without system.repo). Every run records which code it ran (`git rev-parse HEAD` of the checkout, or of
the checkout a copy was made from, else the installed `r2r` version)
and which official server (always SLDisaggregationSystem, asynchronous) in summary.json `official_r2r`.

Entry point: its OpenAI-style server `script/inference/launch_r2r_server.py` (flags built by
tokenrouter.baselines.official_r2r_launch: `--overlap-tp-schedule` by default, as in the paper's two shared GPUs;
CUDA_VISIBLE_DEVICES from the model set's devices; a free port), started as a subprocess in its own process
group; every request goes to its `POST /generate` with our prompt token ids (finite timeout,
system.request_timeout_s), and the reply's `output_ids` and `llm_ratio` (share of tokens from the large model)
become a GenerationResult.

Known issues, and how they are handled:
- Commit 3f33652 (and HEAD after it) replaces the router's decisions with random 10% routing
  (`model_choices = torch.bernoulli(torch.full(..., 0.10))` right after `router.route(...)` in
  r2r/models/sglang_patch/slm_server.py); 14994a0 has the same server interface without it (or delete that one
  line on a newer checkout). We look for that line in the checkout: `system.on_random_routing=error` (default)
  refuses to run it, `accept` runs it and flags the run (stats.known_issue), so its numbers are never mistaken
  for R2R routing.
- Greedy only: a request with temperature > 0 is rejected.
- Router and threshold: the same router our `algorithm=r2r` uses (system.router, else algorithm.router, else
  the official config's router_path), resolved to a local file as official R2R would (and read weights-only
  first: the official code unpickles it in full), and the threshold (system.threshold, then algorithm.threshold,
  then the threshold saved with the router, as `algorithm=r2r` does, then the dataset default of its
  script/evaluate/eval_configs/r2r_configs.json: AIME 0.406, GPQA 0.42, else 0.5) are both written into a
  private copy of its config, which its server reads before its CLI flags. Our own router (safetensors + JSON)
  is exported in its layout into that private directory, so both systems route by the same weights.
- Its router copies the small model's token embedding at start and, if that fails, goes on with a random one
  after one printed line: a start whose log says so is refused.
- `r2r/utils/model_configs.json` is git-ignored upstream (its README has users write it); a checkout without
  it fails at import, so it is asked for in one line.

On CPU (`device: cpu` models, e.g. `make official-cpu` on the local pair): the same server, with our
adaptations loaded into its processes (official_r2r_launch); a pair with no config in the checkout gets one
written from the model set.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tokenrouter.algorithms.checkpoints import check_router, export_official, is_ours, saved_threshold
from tokenrouter.algorithms.router_sources import resolve_router
from tokenrouter.baselines.official_r2r_launch import (
    SERVER,
    SERVER_SCRIPT,
    Launch,
    LaunchOptions,
    build_launch,
    free_port,
    on_cpu,
)
from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.system import ServingSystem, SystemSetup

PINNED_COMMIT = "14994a0"  # last commit before 3f33652 added random 10% routing to slm_server.py
RANDOM_ROUTING = re.compile(r"model_choices\s*=\s*torch\.bernoulli\(\s*torch\.full\(")
SLM_SERVER = "r2r/models/sglang_patch/slm_server.py"
MODEL_CONFIGS = "r2r/utils/model_configs.json"
COPIED_FROM = ".copied_from"  # written by scripts/official_r2r_env.sh into its copy
OUR_ENV = ".venv-r2r/R2R"  # where scripts/official_r2r_env.sh (make official-venv) puts its copy
RANDOM_EMBEDDINGS = "Using randomly initialized LM head and embeddings"  # r2r/models/router.py, on a failed copy
DATASET_THRESHOLDS = {"aime": 0.40595959595959596, "low_effort": 0.40595959595959596,
                      "high_effort": 0.40595959595959596, "gpqa": 0.42}
DEFAULT_THRESHOLD = 0.5
KNOWN = {"repo", "python", "config", "router", "threshold", "port", "tp_small", "tp_large", "overlap_tp_schedule",
         "startup_timeout_s", "request_timeout_s", "on_random_routing"}


def dataset_threshold(workload: str) -> float:
    """R2R's threshold for a workload: by dataset prefix (aime24 -> aime), else its CLI default."""
    for prefix, value in DATASET_THRESHOLDS.items():
        if workload.startswith(prefix):
            return value
    return DEFAULT_THRESHOLD


def config_name(models: list[ModelSpec]) -> str:
    """R2R's config file name for a model pair: config/<small>+<large>.yaml from the Hub ids' basenames."""
    return "+".join(Path(m.source.rstrip("/")).name for m in models) + ".yaml"


def official_version(repo: Path, python: str) -> str:
    """Which official code runs: the checkout's commit, else the `r2r` package version its interpreter has."""
    if (repo / ".git").exists():
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30, check=False)
        if out.returncode == 0:
            return out.stdout.strip()
    copied = repo / COPIED_FROM  # make official-venv's copy: name the checkout it was copied from
    if copied.is_file():
        source = Path(copied.read_text().strip())
        return official_version(source, python) if (source / ".git").exists() else f"copy of {source}"
    probe = "import importlib.metadata as m; print(m.version('r2r'))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    return f"r2r {out.stdout.strip()}" if out.returncode == 0 and out.stdout.strip() else "unknown"


@dataclass(frozen=True)
class RunInfo:
    """What summary.json records about the official run (summary_extra `official_r2r`)."""

    commit: str
    pinned_commit: str
    server: str
    router: str
    threshold: float
    overlap_tp_schedule: bool
    cuda_visible_devices: str
    random_routing: bool
    device: str = "cuda"  # cpu: run with our CPU adaptations (official_r2r_cpu/)


class OfficialR2R(ServingSystem):
    """The thu-nics/R2R server as a ServingSystem (see the module docstring)."""

    def __init__(self, models: list[ModelSpec], repo: Path, workdir: Path, launch: Launch, info: RunInfo, *,
                 port: int, startup_timeout_s: float = 1800.0, request_timeout_s: float = 3600.0) -> None:
        self.model_names = [m.name for m in models]
        self.models = models
        self.repo, self.launch, self.info, self.port = repo, launch, info, port
        self.startup_timeout_s, self.request_timeout_s = startup_timeout_s, request_timeout_s
        self._dir: Path | None = workdir
        self._proc: subprocess.Popen | None = None
        self._client: Any = None
        self._served = 0

    @property
    def threshold(self) -> float:
        return self.info.threshold

    async def start(self) -> None:
        import httpx

        assert self._dir is not None, "start() after close()"
        from tokenrouter.engine.download import download_all

        # as for every other system: Hub models are fetched here, before the server's start-up timeout counts
        await asyncio.to_thread(download_all, self.models)
        self.launch.config_path.write_text(json.dumps(self.launch.config, indent=2))
        log_path = self._dir / "server.log"
        with log_path.open("w") as log:
            self._proc = subprocess.Popen(self.launch.cmd, cwd=self.repo, stdout=log, stderr=subprocess.STDOUT,
                                          env={**os.environ, **self.launch.env}, start_new_session=True)
        self._client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=self.request_timeout_s)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = log_path.read_text()[-400:].strip().replace("\n", " | ")
                status = self._proc.returncode
                await self.close()
                raise UserError(f"official R2R server exited with status {status}: ...{tail}")
            try:
                if (await self._client.get("/health", timeout=2.0)).status_code == 200:
                    if RANDOM_EMBEDDINGS in log_path.read_text(errors="replace"):
                        await self.close()
                        raise UserError("official R2R's router could not copy the small model's token embedding "
                                        "and would route with a random one (its server log says so): refused")
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
        import httpx

        if not req.sampling.greedy:
            raise UserError("official_r2r: the official R2R code is evaluated greedy only (temperature 0)")
        arrival = time.perf_counter()
        body = {"input_ids": list(req.prompt_ids),
                "sampling_params": {"max_new_tokens": req.max_new_tokens, "temperature": 0.0, "top_p": 1.0}}
        try:
            reply = await self._client.post("/generate", json=body)
        except httpx.TimeoutException:
            raise UserError(f"official R2R server gave no answer within {self.request_timeout_s:.0f} s "
                            "(system.request_timeout_s)") from None
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
        out: dict[str, Any] = {"system": "official_r2r", "commit": self.info.commit, "server": self.info.server,
                               "threshold": self.threshold, "requests": self._served}
        if self.info.random_routing:
            out["known_issue"] = "random 10% routing in slm_server.py (router decisions ignored)"
        return out

    def summary_extra(self) -> dict:
        """Which official code and server ran, with which router, threshold and GPUs."""
        return {"official_r2r": asdict(self.info)}


def from_setup(setup: SystemSetup) -> OfficialR2R:
    setup.unknown_fields(KNOWN)
    opts = setup.system
    if len(setup.models) != 2:
        raise UserError("system=official_r2r needs exactly two models (small, large)")
    small, large = setup.models
    repo = find_repo(opts.get("repo"))
    python = opts.get("python") or _default_python(repo)
    python = str(Path(python).expanduser().absolute()) if "/" in python else python  # the server runs in repo
    if not shutil.which(python):
        raise UserError(f"official_r2r: no Python interpreter at {python} (set system.python to R2R's environment)")
    cpu = on_cpu(small, large)
    config = Path(opts["config"]) if opts.get("config") else repo / "config" / config_name(setup.models)
    if config.is_file():
        official = json.loads(config.read_text())  # its "yaml" configs are JSON, read by its server with json.load
    elif cpu and not opts.get("config"):
        official = pair_config(small, large)
    else:
        raise UserError(f"official_r2r: no R2R config {config} for models "
                        f"{[m.source for m in setup.models]} (set system.config)")
    random_routing = _random_routing(repo, opts.get("on_random_routing", "error"))
    workdir = Path(tempfile.mkdtemp(prefix="tokenrouter-r2r-"))
    os.chmod(workdir, 0o700)
    try:
        router, saved, router_source = _router(opts, setup, official, workdir)
        port = int(opts.get("port") or free_port())
        launch_opts = LaunchOptions(
            python=python, config_path=workdir / "config.json", port=port,
            threshold=_threshold(opts, setup, saved), router=router,
            tp_small=int(opts.get("tp_small") or small.tp), tp_large=int(opts.get("tp_large") or large.tp),
            overlap_tp_schedule=bool(opts.get("overlap_tp_schedule", True)) and not cpu,
            local_models=all(_local_path(m) for m in setup.models))
        launch = build_launch(launch_opts, official, small, large, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except BaseException:  # the private dir (an exported router in it) never outlives a failed set-up
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    info = RunInfo(commit=official_version(repo, python), pinned_commit=PINNED_COMMIT, server=SERVER,
                   router=router_source, threshold=launch_opts.threshold, overlap_tp_schedule=launch_opts.overlap_tp_schedule,
                   cuda_visible_devices=launch.env["CUDA_VISIBLE_DEVICES"], random_routing=random_routing,
                   device="cpu" if cpu else "cuda")
    return OfficialR2R(setup.models, repo, workdir, launch, info, port=port,
                       startup_timeout_s=float(opts.get("startup_timeout_s") or 1800),
                       request_timeout_s=float(opts.get("request_timeout_s") or 3600))


def _random_routing(repo: Path, policy: str) -> bool:
    """Whether the checkout has HEAD's random routing line; refused unless the policy accepts it."""
    if policy not in ("error", "accept"):
        raise UserError(f"system.on_random_routing must be 'error' or 'accept', got {policy!r}")
    found = bool(RANDOM_ROUTING.search((repo / SLM_SERVER).read_text()))
    if found and policy == "error":
        raise UserError(f"official_r2r: this R2R checkout replaces router decisions with random 10% routing "
                        f"({SLM_SERVER}); check out {PINNED_COMMIT} or set system.on_random_routing=accept "
                        "to run it anyway (flagged)")
    return found


def _router(opts: dict[str, Any], setup: SystemSetup, official: dict[str, Any],
            workdir: Path) -> tuple[str, float | None, str]:
    """The local checkpoint the server reads, the threshold saved with it, and where it came from: system.router, else
    algorithm.router (r2r), else the official config's router_path. An official .pt is read weights-only here
    (the official code unpickles it in full); ours is exported in the official layout into `workdir`."""
    algo = setup.algorithm.params.get("router") if setup.algorithm.name == "r2r" else None
    ref = opts.get("router") or algo or (official.get("router") or {}).get("router_path")
    if not ref:
        raise UserError("official_r2r: no router (set system.router or algorithm.router)")
    path = resolve_router(str(ref))
    if is_ours(path):
        small = _local_path(setup.models[0]) or setup.models[0].source
        out = workdir / "router.pt"
        return str(out), export_official(str(path), out, pretrained=small), f"{path} (exported)"
    if path.suffix != ".pt":
        raise UserError(f"official_r2r: router {str(ref)!r} is neither an official .pt checkpoint nor ours "
                        "(.safetensors + .json)")
    check_router(str(path), "r2r")
    return str(path), saved_threshold(str(path)), str(path)


def _threshold(opts: dict[str, Any], setup: SystemSetup, saved: float | None) -> float:
    """system.threshold, then algorithm.threshold (r2r sweeps), then the router's saved threshold (what
    `algorithm=r2r` uses), then the workload's dataset default."""
    algo = setup.algorithm.params.get("threshold") if setup.algorithm.name == "r2r" else None
    for value in (opts.get("threshold"), algo, saved):
        if value is not None:
            return float(value)
    return dataset_threshold(setup.workload_name)


def _local_path(model: ModelSpec) -> str | None:
    """The model's local directory, None for a Hub id (downloaded at start)."""
    from tokenrouter.engine.loader import resolve_source

    resolved = resolve_source(model.source)
    return str(resolved.location) if resolved.is_local else None


def pair_config(small: ModelSpec, large: ModelSpec) -> dict[str, Any]:
    """R2R's model config (its config/*.yaml layout) for a pair its checkout has none for: the members' local
    paths or Hub ids; `param` (billions, used only to split GPU memory) does not matter on CPU."""
    def member(m: ModelSpec) -> dict[str, Any]:
        return {"model_name": m.name, "model_path": _local_path(m) or m.source, "param": "1",
                "mem_fraction_static": 0.9}

    return {"quick": member(small), "reference": member(large), "router": {}}


def find_repo(repo: str | None) -> Path:
    """The R2R checkout: `system.repo`, else found from an importable `r2r` package (editable install), else
    the copy `make official-venv` installs (.venv-r2r/R2R under the working directory)."""
    if repo:
        path = Path(repo).expanduser().absolute()
    else:
        try:
            import r2r  # noqa: F401 - only to locate an editable install
        except ImportError:
            path = Path(OUR_ENV).absolute()
            if not path.is_dir():
                raise UserError("system=official_r2r needs the thu-nics/R2R code: `make official-venv` (from "
                                "../shared/third_party or R2R_SRC=your clone), or git clone "
                                "https://github.com/thu-nics/R2R, install it in its own environment "
                                "(see tokenrouter/baselines/official_r2r.py) and set system.repo=PATH") from None
        else:
            path = Path(r2r.__file__).resolve().parents[1]
    if not (path / SERVER_SCRIPT).is_file() or not (path / SLM_SERVER).is_file():
        raise UserError(f"official_r2r: {path} is not a thu-nics/R2R checkout (no {SERVER_SCRIPT})")
    if not (path / MODEL_CONFIGS).is_file():
        raise UserError(f"official_r2r: {path} has no {MODEL_CONFIGS}, which its code reads at import (git-ignored "
                        "upstream; its README has you write it): copy one of its config/*.yaml there")
    return path


def _default_python(repo: Path) -> str:
    """The checkout's own `.venv`, else the environment it sits in (`make official-venv`: <venv>/R2R)."""
    inside = repo.parent / "bin" / "python"
    own = repo / ".venv" / "bin" / "python"
    return str(inside if not own.exists() and inside.exists() else own)
