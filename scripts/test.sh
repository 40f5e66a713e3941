#!/usr/bin/env bash
# Set up .venv and run the full default test suite (plus ruff and mypy).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In development the data sets sit in ../shared/data; elsewhere the loaders download and cache them.
if [ -z "${EDGEDRIFT_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export EDGEDRIFT_DATA_DIR=$(cd ../shared/data && pwd); fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
