"""`system=official_ensemble`: the public Mixture-model-like Ensemble code (github.com/Kamichanw/
Mixture-model-like-Ensemble, snapshot cbe532b in ../shared/third_party/), its `me` method, on the same prompts
and with the same weights as TokenRouter's `algorithm=ensemble`.

Install: `scripts/official_ensemble_env.sh [SRC_DIR] [VENV]` builds `.venv-ensemble` from the code's own
requirements.txt (torch 2.7.1, transformers 4.54.1, ray, lm-eval, ...); then `system=official_ensemble` (with
`system.repo=` / `system.python=` for another clone or venv). Without either it refuses in one line.

How it runs: tokenrouter/baselines/official_ensemble_worker.py is started with that venv's interpreter in its own process
group; it starts a local Ray cluster and the code's own `RayGenerationEngine` (one `ModelWorker` actor per
model, transformers, fp32 on CPU / fp16 on CUDA as its ModelRunner chooses), and generates one request at a
time with the engine's `generate` loop. Requests and answers cross the process boundary as JSON lines (token
ids, which model produced each token, seconds per token); requests are served one at a time, as the code does
(concurrency above 1 only queues them).

The weights are `algorithm.weights` of `algorithm=ensemble` (uniform when it gives none), so both systems mix
the same models in the same proportions; `system.weights` may restate them but never differ.

What differs from TokenRouter's ensemble, by design of the official code (recorded, not hidden):
- Model per step: the official code draws the model for EVERY output token, the first included, from one
  `random.Random` (`choices(range(n), weights)`); TokenRouter's entry model produces the first token and the
  model for each later one is drawn from (request seed, position). Same distribution, different draws:
  `system.draws=tokenrouter` replays TokenRouter's draws through the official loop instead (then greedy
  outputs must agree token for token, up to the numerics of two transformers versions).
- Sampling: greedy here is its `do_sample: false` (argmax of the model's softmax); sampled requests use its
  `_sample_from_probs` (temperature as probs**(1/T), then top-k, then top-p) on the worker's global torch RNG,
  which `system.reseed=request` re-seeds with each request's seed (`run`: once, as its eval.py does).
- Stop: its tokenizer's EOS only (kept in the output, as ours); requests with other stop ids or
  min_new_tokens are refused.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokenrouter.config import ModelSpec
from tokenrouter.errors import UserError
from tokenrouter.generation import GenerationRequest, GenerationResult
from tokenrouter.system import ServingSystem, SystemSetup

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("official_ensemble_worker.py")
DEFAULT_REPO = "../shared/third_party/mixture-model-like-ensemble-cbe532b"
DEFAULT_PYTHON = ".venv-ensemble/bin/python"
ENGINE_FILE = "src/ray_engine.py"
METHODS = ("me",)
ACTORS = ("per_model", "as_shipped")
DRAWS = ("official", "tokenrouter")
RESEED = ("request", "run")
KNOWN = {"repo", "python", "method", "weights", "actors", "draws", "reseed", "num_cpus", "startup_timeout_s",
         "request_timeout_s"}
BUILD_HINT = "scripts/official_ensemble_env.sh"


def resolve(path: str | os.PathLike[str]) -> Path:
    """A config path: absolute as given, else relative to the repository root; `..` folded, links kept (a venv's
    python must run as its own path)."""
    p = Path(path).expanduser()
    return Path(os.path.normpath(p if p.is_absolute() else ROOT / p))


def missing(repo: Path, python: Path) -> str | None:
    """Why the official code cannot run here, in one line, or None when the snapshot and its venv are there."""
    if not (repo / ENGINE_FILE).is_file():
        return (f"official_ensemble: no Mixture-model-like Ensemble code at {repo} (no {ENGINE_FILE}; set "
                "system.repo to a clone of github.com/Kamichanw/Mixture-model-like-Ensemble)")
    if not (python.is_file() and os.access(python, os.X_OK)):
        return (f"official_ensemble: no Python interpreter at {python} (build its environment: {BUILD_HINT} "
                f"{repo} {python.parent.parent}, or set system.python)")
    return None


def official_version(repo: Path) -> str:
    """Which official code runs: the checkout's commit, else the snapshot folder's `-<commit>` suffix."""
    if (repo / ".git").exists():
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30, check=False)
        if out.returncode == 0:
            return out.stdout.strip()
    m = re.search(r"-([0-9a-f]{7,40})$", repo.resolve().name)
    return m.group(1) if m else "unknown"


def ensemble_weights(setup: SystemSetup) -> list[float]:
    """The mixture weights, normalised: algorithm=ensemble's (uniform without any), or system.weights, which
    must then agree with them."""
    n = len(setup.models)
    algo: list[float] | None = None
    if setup.algorithm.name == "ensemble":
        given = setup.algorithm.params.get("weights")
        algo = [1.0] * n if given is None else [float(w) for w in given]
    own = setup.system.get("weights")
    own_w = None if own is None else [float(w) for w in own]
    if algo is None and own_w is None:
        raise UserError("official_ensemble: the weights come from algorithm=ensemble (algorithm.weights) or "
                        "system.weights; neither is set")
    weights = own_w if own_w is not None else algo
    assert weights is not None
    if len(weights) != n or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise UserError(f"official_ensemble: needs one weight >= 0 per model ({n} models) with a positive sum, "
                        f"got {weights}")
    norm = [w / sum(weights) for w in weights]
    if algo is not None and own_w is not None and any(abs(a / sum(algo) - b) > 1e-9 for a, b in zip(algo, norm, strict=True)):
        raise UserError(f"official_ensemble: system.weights {own_w} differ from algorithm.weights {algo}; "
                        "both systems must mix with the same weights")
    return norm


def _choice(opts: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = str(opts.get(key) or allowed[0])
    if value not in allowed:
        raise UserError(f"system.{key} must be one of {list(allowed)}, got {value!r}")
    return value


@dataclass
class RunInfo:
    """What summary.json records about the official run (summary_extra `official_ensemble`)."""

    commit: str
    repo: str
    python: str
    method: str
    weights: list[float]
    actors: str
    draws: str
    reseed: str
    ready: dict[str, Any] = field(default_factory=dict)  # the worker's ready line: versions, tokenizer, actors


class OfficialEnsemble(ServingSystem):
    """The official ME code as a ServingSystem (see the module docstring)."""

    def __init__(self, models: list[ModelSpec], info: RunInfo, *, num_cpus: int | None = None,
                 startup_timeout_s: float = 600.0, request_timeout_s: float = 3600.0, seed: int = 0) -> None:
        self.model_names = [m.name for m in models]
        self.models = models
        self.info = info
        self.num_cpus, self.seed = num_cpus, seed
        self.startup_timeout_s, self.request_timeout_s = startup_timeout_s, request_timeout_s
        self._dir: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._dead: str | None = None
        self._served = 0
        self._tokens = dict.fromkeys(self.model_names, 0)
        self._engine_s = 0.0
        self._drawer: Any = None
        if info.draws == "tokenrouter":
            from tokenrouter.algorithms import build_algorithm

            self._drawer = build_algorithm("ensemble", 0, self.model_names, {"weights": info.weights})

    # --- process ---------------------------------------------------------------------------------------------
    def worker_config(self, paths: list[str], ray_dir: str) -> dict[str, Any]:
        gpus = all(m.device.startswith("cuda") for m in self.models)
        return {
            "repo": self.info.repo, "method": self.info.method,
            "models": [{"name": m.name, "path": p, "weight": w, "quantization": "none"}
                       for m, p, w in zip(self.models, paths, self.info.weights, strict=True)],
            # its generation defaults, made neutral: every request passes its own sampling
            "generation": {"max_gen_toks": 256, "do_sample": False, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                           "seed": self.seed},
            # its own GPU request: one GPU per model actor on GPU nodes, none on CPU
            "ray": {"num_gpus_per_model": 1 if gpus else 0, "local_mode": False},
            "num_gpus": None if gpus else 0, "num_cpus": self.num_cpus, "ray_temp_dir": ray_dir,
            "actors": self.info.actors, "reseed": self.info.reseed,
            # each model's torch threads, as our engines get them (models.members.N.threads)
            "threads": None if gpus else max(m.threads for m in self.models),
        }

    def _log_tail(self) -> str:
        if self._dir is None or not (self._dir / "worker.log").is_file():
            return ""
        lines = [ln for ln in (self._dir / "worker.log").read_text(errors="replace").splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-400:]

    async def start(self) -> None:
        from tokenrouter.engine.download import download_all
        from tokenrouter.engine.loader import loadable_source, local_dir

        await asyncio.to_thread(download_all, self.models)
        paths = []
        for m in self.models:
            if m.engine == "sim" or not m.source:
                raise UserError(f"official_ensemble: model {m.name!r} has no weights (engine sim); the official "
                                "code loads transformers checkpoints")
            if loadable_source(m.source).gguf_file:
                raise UserError(f"official_ensemble: model {m.name!r} is a GGUF file; the official code loads "
                                "Hugging Face directories")
            paths.append(local_dir(m.source))
        self._dir = Path(tempfile.mkdtemp(prefix="trme-"))
        os.chmod(self._dir, 0o700)
        cfg = self.worker_config(paths, str(self._dir / "ray"))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
        env.pop("PYTHONPATH", None)  # our venv's paths must not leak into its interpreter
        if not any(m.device.startswith("cuda") for m in self.models):
            env["CUDA_VISIBLE_DEVICES"] = ""
        log = (self._dir / "worker.log").open("wb")
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self.info.python, str(WORKER), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log, cwd=self.info.repo, env=env, start_new_session=True, limit=1 << 24)
        finally:
            log.close()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write((json.dumps(cfg) + "\n").encode())
        await self._proc.stdin.drain()
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), self.startup_timeout_s)
        except TimeoutError:
            await self.close()
            raise UserError(f"official_ensemble: its engine was not ready after {self.startup_timeout_s:.0f} s "
                            "(system.startup_timeout_s)") from None
        ready = json.loads(line) if line.strip() else {}
        if not ready.get("ready"):
            why = ready.get("error") or f"worker exited with status {await self._proc.wait()}"
            tail = self._log_tail()
            await self.close()
            raise UserError(f"official_ensemble: its engine did not start: {why}" + (f" (log: ...{tail})"
                                                                                      if tail and not ready else ""))
        self.info.ready = ready

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(b'{"op": "shutdown"}\n')
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), 30)
            except (TimeoutError, BrokenPipeError, ConnectionResetError, AssertionError):
                pass
        if proc is not None:  # its Ray processes share the worker's process group: none outlives it
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    await asyncio.wait_for(proc.wait(), wait)
                except TimeoutError:
                    continue
                await asyncio.sleep(0.5)  # the group's other members (raylet, GCS) get the signal too
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # --- requests --------------------------------------------------------------------------------------------
    def schedule(self, req: GenerationRequest) -> list[int] | None:
        """With draws=tokenrouter: the model of each output position as TokenRouter's ensemble draws it: the
        entry model for the first, then for output k the draw on (seed, k - 1), made once token k - 1 is out
        (its `position` then still counts k - 1 tokens: the step's own token is committed after `route`)."""
        if self._drawer is None:
            return None
        from tokenrouter.api import RouterRequest

        out = [0]
        for k in range(1, req.max_new_tokens):
            out.append(self._drawer.draw(RouterRequest("r", list(req.prompt_ids), [0] * (k - 1), seed=req.seed)))
        return out

    def request_line(self, req: GenerationRequest) -> dict[str, Any]:
        if req.stop_token_ids is not None and set(req.stop_token_ids) != {self.info.ready.get("eos_token_id")}:
            raise UserError(f"official_ensemble: the official code stops at its tokenizer's EOS only "
                            f"({self.info.ready.get('eos_token_id')}), not at stop ids {req.stop_token_ids}")
        if req.min_new_tokens:
            raise UserError("official_ensemble: the official code has no min_new_tokens")
        s = req.sampling
        line: dict[str, Any] = {"id": req.index, "prompt_ids": list(req.prompt_ids),
                                "max_new_tokens": req.max_new_tokens, "do_sample": not s.greedy,
                                "seed": s.seed if s.seed is not None else req.seed, "schedule": self.schedule(req)}
        if not s.greedy:
            line.update(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
        return line

    async def _ask(self, line: dict[str, Any]) -> dict[str, Any]:
        if self._dead or self._proc is None:
            raise RuntimeError(self._dead or "official_ensemble: generate() before start()")
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write((json.dumps(line) + "\n").encode())
            await self._proc.stdin.drain()
            raw = await asyncio.wait_for(self._proc.stdout.readline(), self.request_timeout_s)
        except TimeoutError:
            self._dead = "official_ensemble: stopped after a request timed out"
            await self.close()
            raise UserError(f"official_ensemble: no answer within {self.request_timeout_s:.0f} s "
                            "(system.request_timeout_s)") from None
        except (BrokenPipeError, ConnectionResetError):
            raw = b""
        if not raw:
            self._dead = f"official_ensemble: its worker exited ({self._log_tail()})"
            raise RuntimeError(self._dead)
        return json.loads(raw)

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        line = self.request_line(req)
        arrival = time.perf_counter()
        async with self._lock:  # the official engine serves one request at a time; the others queue here
            sent = time.perf_counter()
            reply = await self._ask(line)
            finish = time.perf_counter()
        if reply.get("error"):
            raise UserError(f"official_ensemble: {reply['error']}")
        output = [int(t) for t in reply["output_ids"]]
        models = [int(m) for m in reply["models"]]
        counts = dict.fromkeys(self.model_names, 0)
        for m in models:
            counts[self.model_names[m]] += 1
        for name, n in counts.items():
            self._tokens[name] += n
        self._engine_s += float(reply.get("engine_s") or 0.0)
        self._served += 1
        # the worker's seconds per token count from its receipt of the request, i.e. from `sent`
        commits = [(sent + float(t), 1, self.model_names[m]) for t, m in zip(reply["token_s"], models, strict=True)]
        return GenerationResult(
            index=req.index, prompt_ids=list(req.prompt_ids), output_ids=output,
            finish_reason=reply.get("finish_reason") or "length", tokens_per_model=counts,
            handoffs=sum(1 for a, b in zip(models, models[1:], strict=False) if a != b),
            arrival_s=arrival, first_token_s=commits[0][0] if commits else None, finish_s=finish, commits=commits,
            extra={"queued_s": round(sent - arrival, 6), "worker_wall_s": reply.get("wall_s"),
                   "engine_s": reply.get("engine_s")},
        )

    def stats(self) -> dict[str, Any]:
        total = sum(self._tokens.values())
        return {"system": "official_ensemble", "commit": self.info.commit, "method": self.info.method,
                "requests": self._served, "weights": self.info.weights, "actors": self.info.actors,
                "draws": self.info.draws, "tokens_per_model": dict(self._tokens),
                "token_shares": {k: (v / total if total else 0.0) for k, v in self._tokens.items()},
                "engine_s": round(self._engine_s, 3)}

    def reset_stats(self) -> None:
        """After the warm-up requests: count tokens and engine time of the measured requests only."""
        self._served, self._engine_s = 0, 0.0
        self._tokens = dict.fromkeys(self.model_names, 0)

    def summary_extra(self) -> dict[str, Any]:
        """Which official code ran, from which environment, with which weights, actors and draws."""
        return {"official_ensemble": asdict(self.info)}


def from_setup(setup: SystemSetup) -> OfficialEnsemble:
    setup.unknown_fields(KNOWN)
    opts = setup.system
    if len(setup.models) < 2:
        raise UserError("system=official_ensemble needs 2+ models (the ensemble's members)")
    method = _choice(opts, "method", METHODS)
    actors, draws, reseed = _choice(opts, "actors", ACTORS), _choice(opts, "draws", DRAWS), \
        _choice(opts, "reseed", RESEED)
    weights = ensemble_weights(setup)
    repo = resolve(opts.get("repo") or DEFAULT_REPO)
    python = resolve(opts.get("python") or DEFAULT_PYTHON)
    why = missing(repo, python)
    if why:
        raise UserError(why)
    info = RunInfo(commit=official_version(repo), repo=str(repo.resolve()), python=str(python), method=method,
                   weights=weights, actors=actors, draws=draws, reseed=reseed)
    return OfficialEnsemble(setup.models, info, num_cpus=opts.get("num_cpus"), seed=setup.seed,
                            startup_timeout_s=float(opts.get("startup_timeout_s") or 600),
                            request_timeout_s=float(opts.get("request_timeout_s") or 3600))
