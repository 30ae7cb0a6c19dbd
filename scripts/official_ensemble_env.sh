#!/usr/bin/env bash
# Build the official Mixture-model-like Ensemble code's own environment (`system=official_ensemble`):
#   scripts/official_ensemble_env.sh [SRC_DIR] [VENV]
# SRC_DIR: its snapshot or clone (default ../shared/third_party/mixture-model-like-ensemble-cbe532b, relative to
# the repository root); VENV: the venv to build (default .venv-ensemble in the repository root). It installs the
# code's requirements.txt as it ships (torch 2.7.1, transformers 4.54.1, ray, numpy 1.26.4, lm-eval, hydra-core,
# ...; on a machine without CUDA pip still fetches torch's CUDA build, several GB), plus one pin of ours: its
# numpy==1.26.4 with today's newest pyarrow (pulled by datasets and imported by Ray's serializers whenever an
# actor is created) fails to import ("pyarrow requires NumPy 2.0 or newer"), so pyarrow is held at 21.x (datasets
# 5 asks for >= 21; 21.0.0 imports with numpy 1.26.4, checked). Idempotent: a stamp in VENV holds the hash of
# requirements.txt and that pin; a second call with the same ones only prints one line. Without SRC_DIR it
# prints one line and exits 0 (nothing to build). PYTHON picks the interpreter (default python3; the code's
# README asks for 3.11).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SRC=${1:-../shared/third_party/mixture-model-like-ensemble-cbe532b}
VENV=${2:-.venv-ensemble}
PY=${PYTHON:-python3}
EXTRA=("pyarrow>=21,<22")  # see above: numpy 1.26.4 (its pin) needs a pyarrow built for numpy 1.x
if [ ! -f "$SRC/requirements.txt" ] || [ ! -f "$SRC/src/ray_engine.py" ]; then
    echo "official_ensemble_env: no Mixture-model-like Ensemble code at $SRC (skipped)"
    exit 0
fi
STAMP="$VENV/.official_ensemble_env"
WANT="$(sha256sum "$SRC/requirements.txt" | cut -d' ' -f1) ${EXTRA[*]} $($PY -c 'import sys; print(sys.version.split()[0])')"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    echo "official_ensemble_env: $VENV is up to date ($SRC/requirements.txt)"
    exit 0
fi
start=$(date +%s)
rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r "$SRC/requirements.txt" "${EXTRA[@]}"
# what the worker (tokenrouter/baselines/official_ensemble_worker.py) imports from it, checked once here
"$VENV/bin/python" - "$SRC" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import ray, torch, transformers  # noqa: E401
import pyarrow  # noqa: F401  (Ray imports it when it creates an actor)
from src.ray_engine import RayGenerationEngine  # noqa: F401
print(f"official_ensemble_env: torch {torch.__version__}, transformers {transformers.__version__}, ray {ray.__version__}")
PY
echo "$WANT" > "$STAMP"
echo "official_ensemble_env: built $VENV in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
