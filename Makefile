# One-command set-up: `make demo` runs the main job, `make test` runs the test suite, `make fuzz` fuzzes
# the HTTP server against its own OpenAPI schema (schemathesis, ~2 min).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint fuzz bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: the CPU build of 2.13.0 lies on this machine's disk; elsewhere pip picks the platform build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev,routellm]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tokenrouter demo

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

fuzz: $(STAMP)
	$(PY) benchmarks/fuzz_http.py

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
