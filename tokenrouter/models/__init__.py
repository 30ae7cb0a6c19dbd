"""Models the project builds itself: the tiny random pair for tests and the trained local pair for demos."""
