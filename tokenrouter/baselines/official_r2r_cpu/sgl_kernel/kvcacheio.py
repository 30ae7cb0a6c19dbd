"""Stand-in for sgl_kernel.kvcacheio (CUDA only); see __init__.py."""

from cpu_stand_in import raising_names

from sgl_kernel import CUDA_ONLY

__getattr__ = raising_names("sgl_kernel.kvcacheio", CUDA_ONLY)
