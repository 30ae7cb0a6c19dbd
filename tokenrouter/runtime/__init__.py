"""The serving runtime: one subserver process per model, ZeroMQ IPC, delayed batching, the front end."""
