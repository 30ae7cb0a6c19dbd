"""What the stand-in modules beside this one (sgl_kernel, vllm._custom_ops) give for any name: a callable that
raises when called, so an import of a CUDA-only name succeeds and a call says what was missing."""

from collections.abc import Callable
from typing import Any


def raising_names(module: str, why: str) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `module`: each name is a function raising `<module>.<name> <why>`."""

    def name_of(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> None:
            raise NotImplementedError(f"{module}.{name} {why}")

        call.__name__ = name
        return call

    return name_of
