#!/usr/bin/env bash
# Set up .venv and run the full default test suite (plus ruff, ruff format --check and mypy), then the quick
# tier once more on the numpy path (EDGEDRIFT_NO_KERNELS=1: the compiled kernels off), where they matter.
# Arguments go to pytest, e.g. `bash scripts/test.sh -m quick` for the tier that runs in about a minute; with
# arguments the numpy pass is skipped unless EDGEDRIFT_NUMPY_PASS=1 (EDGEDRIFT_NUMPY_PASS=0 always skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In development the data sets sit in ../shared/data; elsewhere the loaders download and cache them.
if [ -z "${EDGEDRIFT_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export EDGEDRIFT_DATA_DIR=$(cd ../shared/data && pwd); fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
if [ "${EDGEDRIFT_NUMPY_PASS:-$([ $# -eq 0 ] && echo 1 || echo 0)}" = 1 ]; then
  # The kernels change only the learning core's per-sample arithmetic: the unit, contract and property tests
  # (the kernel tests among them) cover it in a few minutes, where the whole suite twice would double CI.
  echo "[test] the quick tier again with the compiled kernels off (EDGEDRIFT_NO_KERNELS=1)"
  EDGEDRIFT_NO_KERNELS=1 .venv/bin/python -m pytest -m "quick and not slow"
fi
