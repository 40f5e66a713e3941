#!/usr/bin/env bash
# Set up .venv and run the full default test suite (plus ruff, ruff format --check and mypy).
# Arguments go to pytest, e.g. `bash scripts/test.sh -m quick` for the tier that runs in about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In development the data sets sit in ../shared/data; elsewhere the loaders download and cache them.
if [ -z "${EDGEDRIFT_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export EDGEDRIFT_DATA_DIR=$(cd ../shared/data && pwd); fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
