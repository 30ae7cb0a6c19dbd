"""Stand-in for sgl-kernel's CUDA build on CPU: SGLang 0.5.1 imports it unconditionally
(srt/_custom_ops.py:29-32, srt/mem_cache/memory_pool_host.py:15-16); calling any kernel raises."""

from typing import Any

__version__ = "0.3.8"


def _cuda_only(name: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"sgl_kernel.{name} is a CUDA kernel: not available on CPU")

    kernel.__name__ = name
    return kernel


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _cuda_only(name)
