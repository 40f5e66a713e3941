#!/usr/bin/env bash
# Set up .venv and run the end-to-end demo: an MQTT broker (Mosquitto when installed, else an embedded one),
# the cloud trainer, three edge agents (ELEC2, Sine1+, ridge regression) fed over MQTT, and the offline
# evaluator on the same streams for comparison. Writes out/demo/ (summary.json, summary.md, logs).
# Flags go to `edgedrift demo` (e.g. --quick, --devices elec2, --limit 10000, --rate 500, --keep-serving).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In development the data sets sit in ../shared/data; elsewhere the loaders download and cache them.
if [ -z "${EDGEDRIFT_DATA_DIR:-}" ] && [ -d ../shared/data ]; then export EDGEDRIFT_DATA_DIR=$(cd ../shared/data && pwd); fi
exec .venv/bin/edgedrift demo "$@"
