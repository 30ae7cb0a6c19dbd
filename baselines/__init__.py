"""The systems TokenRouter is compared against, each a `system=` config of `tokenrouter bench` implementing
`evals.systems.ServingSystem`: lockstep (official R2R semantics on our engines), official_r2r (the public
thu-nics/R2R code), std_serving (single-model servers + external dispatcher), query_routing (RouteLLM) and
single (one model alone)."""
