#!/usr/bin/env bash
# Container smoke test: build the images with the real Docker engine, then run the compose stack for real
# through testcontainers (tests/container/test_compose_smoke.py, which runs deploy/smoke.py): healthy, a
# replayed stream predicted and recomputed, an edge container killed and resumed from its checkpoint
# volume, the cloud and the broker restarted with nothing lost, torn down.
#
#   bash deploy/smoke.sh                 # SQLite registry
#   bash deploy/smoke.sh --postgres      # with deploy/compose.postgres.yml
#   SMOKE_NO_BUILD=1 bash deploy/smoke.sh ...   # reuse the images already built
#   SMOKE_JSON=out/smoke.json bash deploy/smoke.sh  # the figures (image sizes, memory, phases) as JSON
#
# Needs a running Docker engine with the base images python:3.11-slim and eclipse-mosquitto:2 (on the
# project's machines, which reach no image registry, the shared container-engine script provides both;
# deploy/README.md, "Smoke test"), and the compose v2 CLI (`docker compose`), which testcontainers drives.
# redis:7.4-alpine, and postgres:16-alpine with --postgres, are built as stand-ins from deploy/smoke/ when
# the engine lacks them. Builds use the host network (`docker build --network host`): the engine there
# has no NAT for its bridge. Run it before every change to deploy/ or the Dockerfiles; it takes 15-50 min
# here, most of it the image builds (docs/benchmarks.md, "Container smoke test").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
registry=sqlite
for arg in "$@"; do
  case "$arg" in
    --postgres) registry=postgresql ;;
    *) echo "smoke: unknown argument $arg (only --postgres)" >&2; exit 2 ;;
  esac
done

docker info >/dev/null 2>&1 || { echo "smoke: no Docker engine answers (docker info)" >&2; exit 2; }
docker compose version >/dev/null 2>&1 || { echo "smoke: no compose v2 CLI (docker compose)" >&2; exit 2; }
for base in python:3.11-slim eclipse-mosquitto:2; do
  docker image inspect "$base" >/dev/null 2>&1 || { echo "smoke: base image $base is missing" >&2; exit 2; }
done

build() { # TAG DOCKERFILE CONTEXT
  local start=$SECONDS
  echo "[smoke] building $1"
  docker build --network host -q -f "$2" -t "$1" "$3" >/dev/null
  echo "[smoke] built $1 in $((SECONDS - start)) s"
}
stand_in() { # TAG DIRECTORY: built only when the engine lacks the image
  docker image inspect "$1" >/dev/null 2>&1 || build "$1" "$2/Dockerfile" "$2"
}
if [ -z "${SMOKE_NO_BUILD:-}" ]; then
  build edgedrift-cloud:local deploy/cloud/Dockerfile .
  build edgedrift-edge:local deploy/edge/Dockerfile .
fi
stand_in redis:7.4-alpine deploy/smoke/redis
[ "$registry" = sqlite ] || stand_in postgres:16-alpine deploy/smoke/postgres
# EDGEDRIFT_TEST_CONTAINERS=1: a missing engine or image fails the test instead of skipping it.
EDGEDRIFT_TEST_CONTAINERS=1 EDGEDRIFT_SMOKE_JSON=${SMOKE_JSON:-} exec "$PYTHON" -m pytest \
  tests/container/test_compose_smoke.py -m container -k "$registry" -s -p no:cacheprovider
