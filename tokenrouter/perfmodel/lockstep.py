"""Predicted throughput of lock-step R2R (the official implementation's schedule), for comparisons.

One driver steps all N requests on the small model; the K ~ Binomial(N, p) routed rows then take one large
step (the driver waits for it) before the next small step. Every request commits exactly one token per cycle
(its small token if it stayed, the large model's regenerated token if routed), so by renewal reward
    T = E[(N - K) C00 + K C10] / E[L_0(N) + L_1(K) 1{K > 0}].
"""

from __future__ import annotations

from scipy.stats import binom

from tokenrouter.errors import UserError
from tokenrouter.perfmodel.spec import SystemSpec


def lockstep_throughput(spec: SystemSpec, n: int) -> float:
    """Committed tokens per second of lock-step R2R for a one-token-return system (r2r, citer, co_llm, bernoulli)."""
    if spec.num_models != 2 or spec.route[1][0] != 1.0:
        raise UserError(
            "lock-step R2R needs two models where the large model always returns (one-token return)"
        )
    if n < 1:
        raise UserError(f"concurrency must be at least 1, got {n}")
    p = spec.route[0][1]
    probs = binom.pmf(range(n + 1), n, p)
    cycle_ms = spec.latency_ms(0, n) + sum(probs[k] * spec.latency_ms(1, k) for k in range(1, n + 1))
    tokens = n * ((1 - p) * spec.commit[0][0] + p * spec.commit[1][0])
    return tokens / cycle_ms * 1000.0
