"""Build the engine a ModelSpec asks for, by its name in `tokenrouter.registry.ENGINES` (built-ins are imported
on first use, so a sim-only run never loads transformers; an installed `tokenrouter.engines` entry point or
`package.module:Class` names an engine of the user's own)."""

from __future__ import annotations

import gc

from tokenrouter.config import ModelSpec
from tokenrouter.engine.base import Engine
from tokenrouter.errors import UserError
from tokenrouter.registry import ENGINES


def build_engine(spec: ModelSpec) -> Engine:
    engine = _build_bare(spec)
    if spec.prefix_cache_tokens > 0:
        from tokenrouter.engine.prefix_cache import PrefixCachingEngine

        return PrefixCachingEngine(engine, spec.prefix_cache_tokens)
    return engine


def _build_bare(spec: ModelSpec) -> Engine:
    if spec.tp > 1 and spec.engine in ("torch", "sglang"):  # rank 0 of a group of processes (sim refuses tp)
        from tokenrouter.engine.tp import TensorParallelEngine

        return TensorParallelEngine(spec)
    cls = ENGINES.get(spec.engine)  # torch, sim, sglang, or an engine of the user's own
    if not callable(getattr(cls, "from_spec", None)):
        raise UserError(f"model {spec.name!r}: engine {spec.engine!r} ({cls.__name__}) has no from_spec(spec)")
    engine = cls.from_spec(spec)
    if not isinstance(engine, Engine):
        raise UserError(f"model {spec.name!r}: engine {spec.engine!r}'s from_spec returned a "
                        f"{type(engine).__name__}, not a tokenrouter.engine.base.Engine")
    return engine


def close_engines(engines: list[Engine]) -> None:
    """Close in-process engines and give their device memory back (the caller must hold no other reference).

    Why: engines built in a long-lived process (lock-step, a Hydra sweep's jobs in one process) otherwise leave
    their weights and KV in PyTorch's caching allocator, so the next job of the sweep finds the GPU full.
    """
    on_cuda = any(str(e.device).startswith("cuda") for e in engines)
    for engine in engines:
        engine.close()
    engines.clear()
    gc.collect()  # model modules hold reference cycles: free their tensors now, not at some later collection
    if on_cuda:
        import torch

        torch.cuda.empty_cache()


def prepare_models(specs: list[ModelSpec]) -> list[ModelSpec]:
    """Run once in the bench / serve process before any engine loads: the tensor-parallel checks (the only
    place they run: loader.check_tp), download Hub models, then plan GPU memory jointly (one line if the set
    cannot fit). Returns the specs the engines must be built from."""
    from tokenrouter.engine.download import download_all
    from tokenrouter.engine.loader import check_tp, loadable_source
    from tokenrouter.engine.memory_plan import plan_specs

    for spec in specs:  # first, as the front end's constructor checked before: a Hub config.json at most
        check_tp(spec)
    missing = [s for s in specs if s.engine != "sim" and not loadable_source(s.source).is_local]
    # a set that cannot fit fails before any download, where every missing model's size is recorded
    if missing and all(s.footprint is not None for s in missing):
        plan_specs(specs)
    download_all(missing)
    return plan_specs(specs)  # from the files themselves
