"""TokenRouter: a serving runtime and benchmark harness for token-level routing between cooperating LLMs."""

__version__ = "0.1.0"
