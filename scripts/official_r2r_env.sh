#!/usr/bin/env bash
# The official R2R code's own environment (its pins: torch 2.8.0, sglang 0.5.1, transformers 4.55.2,
# sgl-kernel 0.3.8; ~9.4 GB, 3-12 min) with a copy of its checkout inside, installed as its README says
# (`pip install -e .` there, with the model config it has users write: r2r/utils/model_configs.json).
# Usage: scripts/official_r2r_env.sh SRC VENV   (SRC: an R2R checkout at 14994a0; VENV: e.g. .venv-r2r)
# A missing SRC is one line and exit 0 (the side-by-side then skips the official systems).
set -euo pipefail
SRC=${1:?usage: official_r2r_env.sh SRC VENV}
VENV=${2:?usage: official_r2r_env.sh SRC VENV}
PYTHON=${PYTHON:-python3}
if [ ! -f "$SRC/script/inference/launch_r2r_server.py" ]; then
  echo "official R2R: no checkout at $SRC (clone github.com/thu-nics/R2R at 14994a0 there): skipped"
  exit 0
fi
STAMP="$VENV/.installed-r2r"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(cd "$SRC" && pwd)" ]; then
  exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# its pyproject's dependencies (gradio left out: only its demo uses it); sgl-kernel after, as its README does
"$VENV/bin/pip" install -q "torch==2.8.0" "torchao==0.9.0" "transformers==4.55.2" "sglang[all]==0.5.1" accelerate \
  "fastapi>=0.115.12" "pandas>=2.2.3" "pydantic>=2.12.4" xgrammar scikit-learn setproctitle nvidia-ml-py nvtx
"$VENV/bin/pip" install -q "sgl-kernel==0.3.8"
# a writable copy: the checkout may be read-only, and the install writes its egg-info beside the code
rm -rf "$VENV/R2R"
cp -r "$SRC" "$VENV/R2R"
chmod -R u+w "$VENV/R2R"
(cd "$SRC" && pwd) > "$VENV/R2R/.copied_from"   # which checkout ran (summary.json official_r2r.commit)
cp "$VENV/R2R/config/Qwen3-0.6B+Qwen3-8B.yaml" "$VENV/R2R/r2r/utils/model_configs.json"
"$VENV/bin/pip" install -q --no-deps -e "$VENV/R2R"
(cd "$SRC" && pwd) > "$STAMP"
echo "official R2R environment ready: $VENV (code in $VENV/R2R)"
