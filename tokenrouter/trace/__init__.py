"""`runtime.trace`: what each model's batches and each request did, on one time axis, as a Chrome trace.

Why: the runtime's claims are about schedules (models stepping at their own pace, batches that wait for their
threshold, requests that wait for a busy peer); a trace shows them per run, in Perfetto (ui.perfetto.dev) or
chrome://tracing, and `tokenrouter trace summarize` measures them. Three parts:
- `record`: what a stepping loop records per batch (`BatchRecord`, bounded by `BatchRecorder`) and what a system
  collects while tracing (`TraceLog`);
- `chrome`: the Chrome Trace Event document (slices per batch, hand-off flows, request async slices);
- `summary`: per model busy fraction, idle gaps, batch size and where requests waited, from that document.
Times are `time.perf_counter()` seconds, CLOCK_MONOTONIC on Linux: one axis across the processes of a host.
"""
