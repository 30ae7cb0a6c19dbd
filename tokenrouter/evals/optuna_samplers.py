"""An Optuna sampler that evaluates the search space's ends first, then hands over to another sampler.

Why: when a parameter trades one objective for the other monotonically (a router threshold trades accuracy
for throughput), the extremes of the Pareto frontier lie at the ends of its interval. A grid contains them
by construction; a random initial design (NSGA-II's first generation, TPE's start-up trials) reaches them
with probability near 0, so a search with fewer runs than the grid misses the frontier's fast end however
well it does in between (measured: benchmarks/bench_optuna_vs_grid.py). `EndsFirst` spends the first two
trials on every numeric parameter's low and high bound (a 1-D space: its two ends; in more dimensions the
all-low and all-high corners), then `sampler` chooses, with those two trials in the study it learns from.

`hydra/sweeper=optuna_pareto` uses it (conf/hydra/sweeper/sampler/ends_first.yaml), wrapping TPE.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution

ENDS = 2  # trials 0 and 1: all lows, all highs


class EndsFirst(optuna.samplers.BaseSampler):
    def __init__(self, sampler: optuna.samplers.BaseSampler) -> None:
        self.sampler = sampler

    def infer_relative_search_space(self, study: optuna.Study, trial: optuna.trial.FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return {} if trial.number < ENDS else self.sampler.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {} if trial.number < ENDS else self.sampler.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if trial.number < ENDS and not isinstance(param_distribution, CategoricalDistribution):  # low..high
            return param_distribution.low if trial.number == 0 else param_distribution.high
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: Any,
                    values: Any) -> None:
        self.sampler.after_trial(study, trial, state, values)


def ends_first_tpe(**tpe: Any) -> EndsFirst:
    """`EndsFirst` over `optuna.samplers.TPESampler(**tpe)` (multi-objective with several directions; the
    arguments of the sweeper's `tpe` schema)."""
    return EndsFirst(optuna.samplers.TPESampler(**tpe))
