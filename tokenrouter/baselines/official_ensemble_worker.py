"""Runs INSIDE the official Mixture-model-like Ensemble environment (`.venv-ensemble`, built by
scripts/official_ensemble_env.sh): its own code (`src/ray_engine.py`, from the snapshot's root on sys.path)
generates, one request at a time, with its `RayGenerationEngine.generate` loop unchanged. Started by
tokenrouter/baselines/official_ensemble.py; importable with the ensemble venv's packages alone (no tokenrouter import).

Protocol (JSON lines, never pickle): the first stdin line is the run config, answered by one `ready` line; then
one request per line, one answer per line, in order; EOF or {"op": "shutdown"} ends it.

    config  {"repo", "method": "me", "models": [{"name", "path", "weight", "quantization"}], "generation": {...},
             "ray": {"num_gpus_per_model": 0, "local_mode": false}, "actors": "per_model" | "as_shipped",
             "reseed": "request" | "run", "num_cpus": int | null, "num_gpus": int | null, "ray_temp_dir",
             "threads": int | null (torch threads per actor)}
    ready   {"ready": true, "startup_s", "versions", "eos_token_id", "tokenizers", "actors", "torch_threads"}
    request {"id", "prompt_ids": [...], "max_new_tokens", "do_sample", "temperature", "top_k", "top_p",
             "seed", "schedule": null | [model index per output position]}
    answer  {"id", "output_ids", "models": [model index per output token], "token_s": [s after receipt per
             token], "wall_s", "engine_s", "finish_reason": "stop" | "length"}  or  {"id", "error": "one line"}

What is ours and what is theirs:
- The generation loop, the per-step model draw (`self._rng.choices(range(n), weights)`, a `random.Random`
  seeded from `generation.seed`), the sampling (`_sample_from_probs`: argmax when `do_sample` is false, else
  temperature / top-k / top-p and `torch.multinomial` on the driver's global torch RNG), the EOS stop and the
  Ray actors (`ModelWorker` / `ModelGroupWorker`, `ModelRunner` loading transformers models) are theirs.
- Ours, around it: a subclass of `RayGenerationEngine` that records which model each step ran
  (`_next_probs(selected_index)`) and which token it appended (`_append_all`), and, with `actors: per_model`,
  builds one `ModelWorker` actor per model, which is what its `_build_workers` does on a node with a GPU per
  model; on a CPU-only node it would put every model in one `ModelGroupWorker` actor (`actors: as_shipped`
  keeps that). GPUs are asked for through its own config key, `ray.num_gpus_per_model` (0 here).
- `reseed: request` re-seeds its model-draw RNG (`_rng`) and the torch RNG with each request's seed before the
  request (results then do not depend on the order requests come in); `run` seeds both once, as its eval.py
  does. A request's `schedule` replaces its model draws with the given per-position models (to replay
  TokenRouter's draws: identical greedy outputs must then follow); null keeps its own draws.
- transformers 4.54 does not know the class that the local pair's tokenizer_config.json names
  (`TokenizersBackend`, transformers 5); `AutoTokenizer.from_pretrained` falls back to `PreTrainedTokenizerFast`
  on the same files then, in this process and in every Ray worker (Ray's `worker_process_setup_hook`).
- Prompts: its `ModelRunner.reset` takes text, so our prompt ids are decoded with its tokenizer (special tokens
  kept) and must encode back to the same ids (checked per request; a mismatch is an error answer).
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

FALLBACK_MARK = "_official_ensemble_fallback"


def patch_tokenizer_fallback() -> None:
    """AutoTokenizer.from_pretrained, falling back to PreTrainedTokenizerFast (same files) when the directory's
    tokenizer_config.json names a tokenizer class this transformers does not have. Idempotent."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    original = AutoTokenizer.from_pretrained
    if getattr(original, FALLBACK_MARK, False):
        return

    def from_pretrained(path: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(path, *args, **kwargs)
        except ValueError as exc:
            if "does not exist or is not currently imported" not in str(exc) \
                    or not (Path(str(path)) / "tokenizer.json").is_file():
                raise
            kwargs.pop("trust_remote_code", None)
            tok = PreTrainedTokenizerFast.from_pretrained(path, *args, **kwargs)
            tok.init_kwargs[FALLBACK_MARK] = True
            return tok

    setattr(from_pretrained, FALLBACK_MARK, True)
    AutoTokenizer.from_pretrained = from_pretrained  # plain function on the class: called as AutoTokenizer.f(path)


def setup_worker() -> None:
    """Ray's worker_process_setup_hook (every Ray worker process runs it before any task)."""
    patch_tokenizer_fallback()


def _engine_class() -> type:
    import ray
    import torch
    from src.ray_engine import ModelWorker, RayGenerationEngine

    class RecordingEngine(RayGenerationEngine):
        """Its engine, recording the model and the token of every step; its generate loop is unchanged."""

        def __init__(self, cfg: dict, per_model: bool) -> None:
            self._per_model = per_model
            self.steps: list[tuple[int | None, list[int], float]] = []
            self._t0 = time.perf_counter()
            self._selected: int | None = None
            super().__init__(cfg)

        def _build_workers(self) -> None:
            if not self._per_model:
                return super()._build_workers()
            # its own per-model branch (taken when every model has a GPU), with its own GPU request
            visible_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            num_gpus = self.cfg["ray"].get("num_gpus_per_model", 1) if visible_gpus else 0
            worker_cls = ray.remote(num_gpus=num_gpus)(ModelWorker)
            self.workers = [worker_cls.remote(model) for model in self.active_models]
            self.group = None

        def _next_probs(self, selected_index: int | None = None) -> Any:
            self._selected = selected_index
            return super()._next_probs(selected_index)

        def _append_all(self, token_ids_by_model: Any) -> Any:
            out = super()._append_all(token_ids_by_model)
            self.steps.append((self._selected, [int(t) for t in token_ids_by_model[0]],
                               time.perf_counter() - self._t0))
            return out

    return RecordingEngine


class Scripted:
    """Stands in for its `random.Random` model-draw RNG: `choices` returns the next scheduled model."""

    def __init__(self, schedule: list[int]) -> None:
        self.schedule, self.step = schedule, 0

    def choices(self, population: Any, weights: Any = None, k: int = 1) -> list[int]:
        i = self.schedule[min(self.step, len(self.schedule) - 1)]
        self.step += 1
        return [list(population)[i]]


def start(cfg: dict) -> tuple[Any, Any, dict]:
    """Ray up (local, CPU unless asked), its engine built, the entry tokenizer loaded."""
    import ray
    import torch
    import transformers

    repo = str(Path(cfg["repo"]).resolve())
    here = str(Path(__file__).resolve().parent)
    if repo not in sys.path:
        sys.path.insert(0, repo)
    # Ray workers import `src.ray_engine` (its classes travel by reference) and this module (the setup hook)
    os.environ["PYTHONPATH"] = os.pathsep.join([repo, here, *filter(None, [os.environ.get("PYTHONPATH")])])
    patch_tokenizer_fallback()
    seed = int(cfg["generation"].get("seed", 42))
    random.seed(seed)
    torch.manual_seed(seed)  # eval.py seeds the same way before building the engine
    t0 = time.perf_counter()
    runtime_env: dict[str, Any] = {"worker_process_setup_hook": f"{Path(__file__).stem}.setup_worker"}
    if cfg.get("threads"):  # torch threads per actor (Ray leaves its default, all cores, to an actor without CPUs)
        n = str(int(cfg["threads"]))
        runtime_env["env_vars"] = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}
    ray.init(address="local", num_cpus=int(cfg.get("num_cpus") or max(os.cpu_count() or 1, len(cfg["models"]))),
             num_gpus=cfg.get("num_gpus"), include_dashboard=False,  # None: Ray counts the GPUs
             object_store_memory=128 * 1024 * 1024,
             _temp_dir=cfg.get("ray_temp_dir") or tempfile.mkdtemp(prefix="ray-me-"),
             local_mode=bool(cfg["ray"].get("local_mode", False)),
             runtime_env=runtime_env)
    engine_cfg = {"method": cfg["method"], "models": cfg["models"], "generation": dict(cfg["generation"]),
                  "ray": dict(cfg["ray"])}
    engine = _engine_class()(engine_cfg, per_model=cfg.get("actors", "per_model") == "per_model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(cfg["models"][0]["path"], trust_remote_code=True)
    threads: list[int] = []
    try:  # each actor's torch thread count (what one model step gets), best effort
        actors = engine.workers if engine.workers is not None else [engine.group]
        threads = ray.get([a.__ray_call__.remote(lambda self: __import__("torch").get_num_threads())
                           for a in actors])
    except Exception:  # noqa: BLE001 - an older Ray without __ray_call__: not needed for the run
        pass
    ready = {
        "ready": True, "startup_s": round(time.perf_counter() - t0, 3),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "ray": ray.__version__,
                     "python": sys.version.split()[0]},
        "eos_token_id": tokenizer.eos_token_id,
        "tokenizers": [type(tokenizer).__name__ + (" (fallback)" if tokenizer.init_kwargs.get(FALLBACK_MARK)
                                                   else "")],
        "same_tokenizer": bool(engine.mapper.same_tokenizer),
        "weights": engine.weights,
        "actors": "per_model" if engine.workers is not None else "group",
        "torch_threads": threads,
    }
    return engine, tokenizer, ready


def serve_one(engine: Any, tokenizer: Any, cfg: dict, req: dict) -> dict:
    import torch

    t0 = time.perf_counter()
    ids = [int(t) for t in req["prompt_ids"]]
    text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    again = tokenizer(text).input_ids
    if again != ids:
        first = next((i for i, (a, b) in enumerate(zip(again, ids, strict=False)) if a != b), min(len(again), len(ids)))
        return {"id": req.get("id"), "error": f"prompt ids do not survive its tokenizer's decode/encode round "
                f"trip (first difference at {first} of {len(ids)}); its ModelRunner takes text"}
    if cfg.get("reseed", "request") == "request":
        engine._rng = random.Random(int(req["seed"]))
        torch.manual_seed(int(req["seed"]))
    if req.get("schedule") is not None:
        engine._rng = Scripted([int(m) for m in req["schedule"]])
    gen = {"max_gen_toks": int(req["max_new_tokens"]), "do_sample": bool(req.get("do_sample", False))}
    for key in ("temperature", "top_k", "top_p"):
        if req.get(key) is not None:
            gen[key] = req[key]
    engine.steps = []
    engine._t0 = t0
    e0 = engine.timer.elapsed
    engine.generate(text, gen)
    steps = engine.steps
    out = [t for _, toks, _ in steps for t in toks]
    eos = tokenizer.eos_token_id
    return {
        "id": req.get("id"), "output_ids": out,
        "models": [m if m is not None else -1 for m, toks, _ in steps for _ in toks],
        "token_s": [round(s, 6) for _, toks, s in steps for _ in toks],
        "wall_s": round(time.perf_counter() - t0, 6), "engine_s": round(engine.timer.elapsed - e0, 6),
        "finish_reason": "stop" if out and eos is not None and out[-1] == eos else "length",
    }


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's stdout: only JSON lines go here
    os.dup2(2, 1)  # anything else (Ray, transformers, print) goes to stderr
    sys.stdout = sys.stderr

    def send(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    line = sys.stdin.readline()
    if not line:
        return 0
    cfg = json.loads(line)
    try:
        engine, tokenizer, ready = start(cfg)
    except Exception as exc:  # noqa: BLE001 - one line back, the traceback on stderr
        traceback.print_exc()
        send({"ready": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
        return 1
    send(ready)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            if req.get("op") == "shutdown":
                break
            try:
                send(serve_one(engine, tokenizer, cfg, req))
            except Exception as exc:  # noqa: BLE001 - this request failed; say so in one line and go on
                traceback.print_exc()
                send({"id": req.get("id"), "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
    finally:
        import ray

        try:
            engine.shutdown()
        finally:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
