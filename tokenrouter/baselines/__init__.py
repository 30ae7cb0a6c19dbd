"""The systems TokenRouter is compared against, each a `system=` config of `tokenrouter bench` implementing
`tokenrouter.system.ServingSystem`: lockstep (official R2R semantics on our engines), official_r2r (the public
thu-nics/R2R code), std_serving (single-model servers + external dispatcher), query_routing (RouteLLM) and
single (one model alone).

They import only the core (`tokenrouter`, not its CLI), never the harness (checked by tests/test_import_graph.py).
"""
