"""SGLang's own activations: sglang/srt/layers/activation.py:233-237 imports these names from vLLM on a CPU
without AMX (by then the module has defined its classes, so this import returns them unchanged)."""

from sglang.srt.layers.activation import GeluAndMul, SiluAndMul

__all__ = ["GeluAndMul", "SiluAndMul"]
