#!/usr/bin/env bash
# Regenerate constraints.txt (the pinned third-party versions of a reproducible install) from .venv,
# after a dependency changed in a pyproject file: bash scripts/setup.sh && bash scripts/lock.sh
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# Pinned versions of every third-party package EdgeDrift and its dev tools use: the reproducible install."
  echo "# Used by scripts/setup.sh, the Dockerfiles and scripts/wheels.sh (pip install -c constraints.txt ...)."
  echo "# Regenerate after a dependency change: bash scripts/setup.sh && bash scripts/lock.sh"
  .venv/bin/python -m pip freeze --exclude-editable --all | grep -vi '^edgedrift' | grep -v '^pip==\|^setuptools==\|^wheel=='
} > constraints.txt.new
mv constraints.txt.new constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pinned packages"
