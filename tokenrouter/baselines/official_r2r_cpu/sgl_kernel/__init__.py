"""Stand-in for sgl-kernel's CUDA build on CPU: SGLang 0.5.1 imports it unconditionally
(srt/_custom_ops.py:29-32, srt/mem_cache/memory_pool_host.py:15-16); calling any kernel raises."""

from cpu_stand_in import raising_names

__version__ = "0.3.8"
CUDA_ONLY = "is a CUDA kernel: not available on CPU"

__getattr__ = raising_names("sgl_kernel", CUDA_ONLY)
