"""Stand-in for `vllm._custom_ops`: SGLang imports `rotary_embedding` on CPU but never calls it for our models."""

from typing import Any


def rotary_embedding(*args: Any, **kwargs: Any) -> None:
    raise NotImplementedError("vllm custom ops are not available: tokenrouter's CPU stand-in was called")
