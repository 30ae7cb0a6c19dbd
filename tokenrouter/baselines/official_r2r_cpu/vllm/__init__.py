"""Stand-in `vllm` for SGLang 0.5.1 on CPU (see ../README.md); it provides no vLLM functionality."""
