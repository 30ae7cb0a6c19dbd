"""EndsFirst: the search space's ends first, then the wrapped sampler, which learns from those trials."""

from __future__ import annotations

import pytest

optuna = pytest.importorskip("optuna")

from tokenrouter.evals.optuna_samplers import EndsFirst, ends_first_tpe  # noqa: E402


def test_the_first_two_trials_are_the_ends_then_the_wrapped_sampler_decides() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=ends_first_tpe(seed=3, n_startup_trials=2))
    seen = []
    for _ in range(8):
        trial = study.ask()
        t = trial.suggest_float("t", 0.1, 0.9)
        n = trial.suggest_int("n", 1, 16)
        kind = trial.suggest_categorical("kind", ["a", "b"])
        seen.append((t, n))
        study.tell(trial, [1.0 - t + (kind == "a"), t * n])  # the frontier's ends are the space's ends
    assert seen[:2] == [(0.1, 1), (0.9, 16)]
    assert all(0.1 <= t <= 0.9 and 1 <= n <= 16 for t, n in seen[2:])
    assert len({t for t, _ in seen[2:]}) == 6  # not the ends again: TPE samples inside
    assert len(study.trials) == 8 and isinstance(study.sampler, EndsFirst)
