"""Import hooks that let the official R2R server (14994a0, SGLang 0.5.1) run on CPU with its files untouched.

Each hook runs when its module is imported, in every process of the server (sitecustomize.py installs them
when TOKENROUTER_R2R_CPU=1). What each answers, by the file and line of the official code at 14994a0:
- torch: `slm_server.py:250-251`, `llm_server.py:180-181` start nccl and call torch.cuda.set_device: gloo and
  no device on CPU.
- sglang.srt.server_args.ServerArgs: every server it builds runs on CPU with SGLang's torch_native attention
  (its CPU default needs a CPU build of sgl-kernel) in the dtype asked, without CUDA graphs, with a KV pool of
  TOKENROUTER_R2R_KV_TOKENS tokens; this also overrides `llm_server.py:133-135`, which forces flashinfer.
- r2r.models.sglang_patch.schedule_batch: its own copy of SGLang's server-args dict (`:116`) keeps the class
  defaults, so `:573` would launch a Triton kernel; it gets the backend the servers run.
- r2r.models.sglang_patch.flashinfer_cuda_graph: `:52-54` annotate with flashinfer names that exist only with
  CUDA (NameError at import); they are defined as placeholders before the module runs.
- r2r.utils.switching.NeuralSwitching: the router on CPU without CUDA graphs (`:314` defaults to both).
- r2r.models.sglang_patch.sl_disaggregation_system.SLDisaggregationSystem: `http_server.py:90-105` passes
  device "cuda" and bf16; CPU and the dtype asked instead.
- transformers.AutoTokenizer: a tokenizer_config naming a class this transformers does not know (the local
  pair's, saved by transformers 5) loads as PreTrainedTokenizerFast from the same tokenizer.json.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], None]
DTYPE = os.environ.get("TOKENROUTER_R2R_DTYPE", "float32")
KV_TOKENS = int(os.environ.get("TOKENROUTER_R2R_KV_TOKENS", "8192"))
FLASHINFER_NAMES = ("BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
                    "BatchPrefillWithRaggedKVCacheWrapper")


class _HookedLoader(importlib.abc.Loader):
    """Runs `before` on the fresh module, the real loader, then `after`."""

    def __init__(self, loader: importlib.abc.Loader, before: Hook | None, after: Hook | None) -> None:
        self.loader, self.before, self.after = loader, before, after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self.before:
            self.before(module)
        self.loader.exec_module(module)
        if self.after:
            self.after(module)


class _HookFinder(importlib.abc.MetaPathFinder):
    """Finds watched modules through the other finders and wraps their loaders."""

    def __init__(self, before: dict[str, Hook], after: dict[str, Hook]) -> None:
        self.before, self.after = before, after

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.before and name not in self.after:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _HookFinder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _HookedLoader(spec.loader, self.before.get(name), self.after.get(name))
                return spec
        return None


def _patch_torch(torch: ModuleType) -> None:
    import torch.distributed as dist

    init = dist.init_process_group

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") == "nccl" or (args and args[0] == "nccl"):
            args = ("gloo", *args[1:]) if args else args
            kwargs = {**kwargs, "backend": "gloo"} if "backend" in kwargs else kwargs
        return init(*args, **kwargs)

    dist.init_process_group = init_process_group
    torch.cuda.set_device = lambda device: None


def _patch_server_args(module: ModuleType) -> None:
    cls = module.ServerArgs
    post_init = cls.__post_init__

    @functools.wraps(post_init)
    def __post_init__(self: Any) -> None:
        self.device = "cpu"
        self.attention_backend = "torch_native"
        self.sampling_backend = "pytorch"
        self.dtype = DTYPE
        self.disable_cuda_graph = True
        self.max_total_tokens = KV_TOKENS
        post_init(self)

    cls.__post_init__ = __post_init__


def _patch_schedule_batch(module: ModuleType) -> None:
    module.global_server_args_dict["attention_backend"] = "torch_native"


def _flashinfer_placeholders(module: ModuleType) -> None:
    for name in FLASHINFER_NAMES:
        module.__dict__.setdefault(name, Any)


def _patch_switching(module: ModuleType) -> None:
    cls = module.NeuralSwitching
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, "device": "cpu", "use_cuda_graph": False})

    cls.__init__ = __init__


def _patch_system(module: ModuleType) -> None:
    import torch

    cls = module.SLDisaggregationSystem
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in ("quick_sglang_kwargs", "reference_sglang_kwargs"):
            kwargs[key] = {**(kwargs.get(key) or {}), "dtype": DTYPE}
        init(self, *args, **{**kwargs, "device": "cpu", "dtype": getattr(torch, DTYPE)})

    cls.__init__ = __init__


def _patch_auto_tokenizer(module: ModuleType) -> None:
    cls = module.AutoTokenizer
    original = cls.from_pretrained.__func__

    @functools.wraps(original)
    def from_pretrained(klass: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(klass, path, *args, **kwargs)
        except ValueError as exc:
            if "does not exist or is not currently imported" not in str(exc):
                raise
            from transformers import PreTrainedTokenizerFast

            kwargs.pop("trust_remote_code", None)
            kwargs.pop("use_fast", None)
            return PreTrainedTokenizerFast.from_pretrained(path, *args, **kwargs)

    cls.from_pretrained = classmethod(from_pretrained)


BEFORE: dict[str, Hook] = {"r2r.models.sglang_patch.flashinfer_cuda_graph": _flashinfer_placeholders}
AFTER: dict[str, Hook] = {
    "torch": _patch_torch,
    "sglang.srt.server_args": _patch_server_args,
    "r2r.models.sglang_patch.schedule_batch": _patch_schedule_batch,
    "r2r.utils.switching": _patch_switching,
    "r2r.models.sglang_patch.sl_disaggregation_system": _patch_system,
    "transformers.models.auto.tokenization_auto": _patch_auto_tokenizer,
}


def install() -> None:
    """Put the hooks first on sys.meta_path (modules already imported are patched now)."""
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    for name, hook in AFTER.items():
        if name in sys.modules:
            hook(sys.modules[name])
    sys.meta_path.insert(0, _HookFinder(BEFORE, AFTER))
