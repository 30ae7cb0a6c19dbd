"""SGLang's own norms: sglang/srt/layers/layernorm.py:290-294 imports these names from vLLM on a CPU without AMX
(by then the module has defined its classes, so this import returns them unchanged)."""

from sglang.srt.layers.layernorm import GemmaRMSNorm, RMSNorm

__all__ = ["GemmaRMSNorm", "RMSNorm"]
