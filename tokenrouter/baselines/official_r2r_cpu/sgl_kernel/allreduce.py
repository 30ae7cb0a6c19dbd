"""Stand-in for sgl_kernel.allreduce (CUDA only); see __init__.py."""

from typing import Any

from sgl_kernel import _cuda_only


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _cuda_only("allreduce." + name)
