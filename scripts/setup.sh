#!/usr/bin/env bash
# Create .venv (if needed) and install every EdgeDrift part in editable mode plus the dev tools.
# Re-running is cheap: the install is skipped while the pyproject files and constraints.txt are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "EdgeDrift needs Python 3.11+ (found $("$PY" --version 2>&1)); set PYTHON=..." >&2; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PARTS="shared cloud_trainer edge_agent evaluator harness demo"
# The compiled kernels (shared/setup.py, shared/edgedrift/_kernels.c) are rebuilt when they change too.
stamp=$(for part in $PARTS; do cat "$part/pyproject.toml"; done | cat - shared/setup.py shared/edgedrift/*.c \
        requirements-dev.txt constraints.txt | sha256sum | cut -c1-16)
if [ "$(cat .venv/.edgedrift-installed 2>/dev/null)" != "$stamp" ]; then
  echo "[setup] installing EdgeDrift into .venv (first run takes a minute) ..."
  .venv/bin/python -m pip install --quiet --upgrade pip
  # constraints.txt pins every third-party package (scripts/lock.sh regenerates it; a pyproject bound above
  # its pin needs the pin raised by hand first).
  .venv/bin/python -m pip install --quiet -c constraints.txt -e "./shared[training,river,onnx]" -e "./cloud_trainer[tracing,jobs]" -e "./edge_agent[tracing]" \
    -e ./evaluator -e "./harness[containers]" -e ./demo \
    -r requirements-dev.txt
  echo "$stamp" > .venv/.edgedrift-installed
fi
