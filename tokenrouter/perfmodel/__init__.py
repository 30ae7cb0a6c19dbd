"""Throughput model of delayed batching (the paper's): Markov chain, event simulator, threshold optimizer.

The runtime calls `auto_thresholds` for `thresholds=auto`; `tokenrouter model ...` is the command line.
"""

from tokenrouter.perfmodel.chain import ChainResult, throughput
from tokenrouter.perfmodel.optimize import OptimizeResult, optimize, optimize_table
from tokenrouter.perfmodel.presets import preset, preset_for_algorithm
from tokenrouter.perfmodel.simulate import SimResult, simulate
from tokenrouter.perfmodel.spec import InfeasibleThresholds, SystemSpec, check_thresholds
from tokenrouter.perfmodel.threshold_table import auto_local_rules, auto_thresholds

__all__ = [
    "ChainResult",
    "InfeasibleThresholds",
    "OptimizeResult",
    "SimResult",
    "SystemSpec",
    "auto_local_rules",
    "auto_thresholds",
    "check_thresholds",
    "optimize",
    "optimize_table",
    "preset",
    "preset_for_algorithm",
    "simulate",
    "throughput",
]
