"""Routing algorithms, one small module each; `tokenrouter.api.algorithm_class(name)` imports them by name."""
