#!/usr/bin/env bash
# Container smoke test: build the images with the real Docker engine, then run the compose stack for
# real (deploy/smoke.py): healthy, a replayed stream predicted and recomputed, an edge container killed
# and resumed from its checkpoint volume, the cloud and the broker restarted with nothing lost, torn down.
#
#   bash deploy/smoke.sh                 # SQLite registry
#   bash deploy/smoke.sh --postgres      # with deploy/compose.postgres.yml (builds a PostgreSQL stand-in
#                                        # from deploy/smoke/postgres when postgres:16-alpine is absent)
#   SMOKE_NO_BUILD=1 bash deploy/smoke.sh ...   # reuse the images already built
#
# Needs a running Docker engine with the base images python:3.11-slim and eclipse-mosquitto:2 (on the
# project's machines, which reach no image registry, the shared container-engine script provides both;
# deploy/README.md, "Smoke test"). Builds use the host network (`docker build --network host`): the
# engine there has no NAT for its bridge. Other flags go to deploy/smoke.py (--cli v1|v2, --samples N,
# --json PATH, --keep). Run it before every change to deploy/ or the Dockerfiles; it takes 25-45 min
# here, most of it the image builds (docs/benchmarks.md, "Container smoke test").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}

docker info >/dev/null 2>&1 || { echo "smoke: no Docker engine answers (docker info)" >&2; exit 2; }
for base in python:3.11-slim eclipse-mosquitto:2; do
  docker image inspect "$base" >/dev/null 2>&1 || { echo "smoke: base image $base is missing" >&2; exit 2; }
done

build() { # TAG DOCKERFILE CONTEXT
  local start=$SECONDS
  echo "[smoke] building $1"
  docker build --network host -q -f "$2" -t "$1" "$3" >/dev/null
  echo "[smoke] built $1 in $((SECONDS - start)) s"
}
if [ -z "${SMOKE_NO_BUILD:-}" ]; then
  build edgedrift-cloud:local deploy/cloud/Dockerfile .
  build edgedrift-edge:local deploy/edge/Dockerfile .
fi
if [[ " $* " == *" --postgres "* ]] && ! docker image inspect postgres:16-alpine >/dev/null 2>&1; then
  build postgres:16-alpine deploy/smoke/postgres/Dockerfile deploy/smoke/postgres
fi
exec "$PYTHON" deploy/smoke.py "$@"
