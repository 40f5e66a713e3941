#!/usr/bin/env bash
# Set up .venv and run the main job. Until the edge/cloud demo lands this is the offline evaluator on ELEC2
# (DRUiD protocol, every strategy and river peer, all 10 label offsets), written to ./out/elec2.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In development the data sets sit in ../shared/data; elsewhere the loaders download and cache them.
if [ -z "${EDGEDRIFT_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export EDGEDRIFT_DATA_DIR=$(cd ../shared/data && pwd); fi
exec .venv/bin/edgedrift evaluate --dataset elec2 --protocol druid \
  --strategies all --out out/elec2 "$@"
