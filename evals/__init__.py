"""The evaluation harness: workloads, grading, metrics, result store and reports (plus the benchmark's serving
systems). Modules are imported directly (`evals.workloads`, `evals.grading`, ...) so importing the package
stays cheap."""
