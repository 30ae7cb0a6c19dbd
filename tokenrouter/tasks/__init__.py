"""Tasks the core itself trains and checks on: the `arith` generator and answer grading.

Why in the core and not in `tokenrouter/evals/`: the trained local pair (`tiny:small`, `tiny:large`) is built on demand by
the engine loader from the arith generator, and its build records held-out accuracies with the same grader the
benchmark uses. `tokenrouter/evals/` turns the generator into a workload (`tokenrouter.evals.arith`) and grades every run with it.
"""
