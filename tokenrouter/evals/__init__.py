"""The evaluation harness: workloads, metrics, the registry of serving systems and the benchmark runner, result
store and reports. Modules are imported directly (`tokenrouter.evals.workloads`, `tokenrouter.evals.bench`, ...) so importing the
package stays cheap."""
