#!/usr/bin/env bash
# Set up .venv and run the full default test suite (plus ruff, ruff format --check and mypy), then the numpy
# pass (EDGEDRIFT_NO_KERNELS=1: the compiled kernels off): the quick tier, and every other test module whose
# processes used a compiled kernel in the first pass. The first pass records those with
# EDGEDRIFT_KERNEL_TRACE (edgedrift.kernel_trace, tests/support/kernel_trace.py); a module none of whose
# processes read a kernel runs the same code on numpy, and a kernel used outside one module's processes
# (a session-wide fixture, say) makes the numpy pass the whole selection again. Modules marked
# kernel_agnostic (their checks do not depend on the path that computes) are left out of the numpy pass.
# Arguments go to pytest, e.g. `bash scripts/test.sh -m quick` for the tier that runs in about a minute; with
# arguments the numpy pass is skipped unless EDGEDRIFT_NUMPY_PASS=1 (EDGEDRIFT_NUMPY_PASS=0 always skips it),
# and it then re-runs the recorded modules of the arguments' selection.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In development the data sets sit in ../shared/data; elsewhere the loaders download and cache them.
if [ -z "${EDGEDRIFT_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export EDGEDRIFT_DATA_DIR=$(cd ../shared/data && pwd); fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
numpy_pass=${EDGEDRIFT_NUMPY_PASS:-$([ $# -eq 0 ] && echo 1 || echo 0)}
if [ "$numpy_pass" = 1 ]; then
  EDGEDRIFT_KERNEL_TRACE=$(mktemp -d "${TMPDIR:-/tmp}/edgedrift-kernel-trace.XXXXXX")
  export EDGEDRIFT_KERNEL_TRACE
  trap 'rm -rf "$EDGEDRIFT_KERNEL_TRACE"' EXIT
fi
.venv/bin/python -m pytest "$@"
[ "$numpy_pass" = 1 ] || exit 0
again=$(PYTHONPATH=tests .venv/bin/python -m support.kernel_trace "$EDGEDRIFT_KERNEL_TRACE")
export EDGEDRIFT_NO_KERNELS=1
# Modules marked kernel_agnostic load the kernels but check nothing that depends on them (pyproject's
# markers say which kind): the numpy pass leaves them out, which keeps CI within its 90 minutes.
agnostic="not slow and not container and not kernel_agnostic"
if [ "$again" = all ]; then
  .venv/bin/python -m pytest -m "$agnostic" "$@"
else
  echo "[test] the quick tier again with the compiled kernels off (EDGEDRIFT_NO_KERNELS=1)"
  .venv/bin/python -m pytest -m "quick and not slow"
  if [ -n "$again" ]; then
    mapfile -t modules <<<"$again"
    echo "[test] the ${#modules[@]} other modules whose processes used a kernel, with the kernels off"
    .venv/bin/python -m pytest -m "$agnostic" "${modules[@]}" || [ $? -eq 5 ]  # 5: all of them agnostic
  fi
fi
