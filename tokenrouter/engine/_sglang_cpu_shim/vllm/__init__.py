"""Stand-in `vllm` package for SGLang on CPU (see ../README.md); it provides no vLLM functionality."""
