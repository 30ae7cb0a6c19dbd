"""The paper's published figures that reports print next to ours (GPU anchors: not reproducible on CPU).

Restated from the paper (arXiv 2610.12242): Table 3, the ablation and Table 10.
"""

from __future__ import annotations

# Table 3, R2R vs TokenRouter decoding throughput (tok/s, N=4), keyed by "small/large" model sizes.
TABLE3_N = 4
TABLE3: dict[str, tuple[float, float, float]] = {
    "0.6B/8B": (105.1, 336.98, 3.21),
    "0.6B/32B": (77.08, 197.40, 2.56),
    "1.7B/8B": (103.37, 285.41, 2.76),
    "4B/8B": (106.67, 211.81, 1.99),
}

# Ablation (tok/s at N = 8 / 4 / 1), on one pair (ABLATION_PAIR) on GPUs: only runs on that pair sit beside it.
ABLATION_PAIR = "0.6B/32B"
ABLATION: dict[str, dict[int, float]] = {
    "full": {8: 372.48, 4: 210.61, 1: 73.02},
    "w/o delayed batching": {8: 296.86, 4: 161.26, 1: 73.02},
    "w/o delayed batching, w/o async": {8: 230.79, 4: 143.88, 1: 73.02},
    "official R2R": {8: 134.89, 4: 73.27, 1: 36.17},
}

# Table 10: where a Std. Serving small-model step goes on SGLang (ms per step; GPU).
STD_SERVING_STEP_MS = {"step": 37.2, "inference": 1.56, "prefix_matching": 7.78, "cache_locks": 6.49 + 5.13,
                       "radix_updates": 12.12, "other": 4.08}
