#!/usr/bin/env bash
# What a user installing EdgeDrift gets: a wheel of every part and of the `edgedrift` meta-package, installed
# into a clean virtual environment (dependencies from PyPI, pinned by constraints.txt), where the first
# commands of a new user run: `edgedrift --help`, the README's Python snippet and a one-offset evaluation.
# CI runs it after scripts/test.sh (.ci/run); about 2 minutes with a warm pip cache.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
PY=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/edgedrift-wheels.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Build from copies (symbolic links such as VERSION resolved), so the checkout gets no build/ folders.
for part in shared cloud_trainer edge_agent evaluator harness demo meta; do
  mkdir -p "$work/src"
  (cd "$root" && tar --exclude='*.egg-info' --exclude=__pycache__ --exclude=build -chf - "$part") | tar -xf - -C "$work/src"
  "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheels" "$work/src/$part"
done
echo "[wheels] built: $(cd "$work/wheels" && ls | tr '\n' ' ')"
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | { grep -v "^WARNING: Location" || true; }
"$work/venv/bin/python" -m pip install --quiet -c "$root/constraints.txt" --find-links "$work/wheels" \
  "edgedrift[all]" 2>&1 | { grep -v "^WARNING: Location" || true; }
"$work/venv/bin/python" -m pip check
cd "$work"  # away from the checkout: everything must come from the wheels
export EDGEDRIFT_CACHE_DIR="$work/cache"
venv/bin/edgedrift --version
venv/bin/edgedrift --help >/dev/null
venv/bin/edgedrift-edge --help >/dev/null
venv/bin/edgedrift-cloud --help >/dev/null
venv/bin/python "$root/scripts/readme_snippet.py" "$root/README.md"
venv/bin/edgedrift evaluate --dataset 'sine1+:d=5,n_concepts=2,concept_length=5000' --strategies druid,periodic \
  --grid druid=0.999 --grid periodic=500 --offsets 0 --jobs 1 --no-progress --out "$work/eval" >/dev/null
test -s "$work/eval/results.json"
echo "[wheels] clean-venv install OK: edgedrift --help, the README snippet and a one-offset evaluation ran"
