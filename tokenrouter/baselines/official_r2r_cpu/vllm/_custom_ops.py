"""Stand-in for `vllm._custom_ops`: SGLang imports names from it on CPU (the rotary embedding's
`rotary_embedding`, quantization kernels at model import) without calling them for the local pair's models."""

from cpu_stand_in import raising_names

__getattr__ = raising_names("vllm._custom_ops", "is not available: tokenrouter's CPU stand-in was called")
