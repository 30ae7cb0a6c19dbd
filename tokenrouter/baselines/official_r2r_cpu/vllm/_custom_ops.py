"""Stand-in for `vllm._custom_ops`: SGLang imports names from it on CPU (the rotary embedding's
`rotary_embedding`, quantization kernels at model import) without calling them for the local pair's models."""

from typing import Any


def _unavailable(name: str) -> Any:
    def op(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"vllm._custom_ops.{name} is not available: tokenrouter's CPU stand-in was called")

    op.__name__ = name
    return op


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _unavailable(name)
