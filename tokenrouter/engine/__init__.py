"""Model engines: one interface (`Engine`) over real models (torch), latency simulators (sim) and SGLang."""

from tokenrouter.engine.base import Engine, SamplingParams, StepItem, StepOutput
from tokenrouter.engine.factory import build_engine

__all__ = ["Engine", "SamplingParams", "StepItem", "StepOutput", "build_engine"]
