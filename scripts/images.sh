#!/usr/bin/env bash
# Build the cloud and edge images for linux/amd64 and linux/arm64 (ARM gateways) with docker buildx bake
# (deploy/docker-bake.json), tagged IMAGE_PREFIX + edgedrift-{cloud,edge} : IMAGE_TAG, the variables
# docker-compose.yml reads too. IMAGE_TAG defaults to the release (shared/VERSION) here.
#
#   IMAGE_PREFIX=registry.example.org/edgedrift/ bash scripts/images.sh --push    # both platforms, pushed
#   bash scripts/images.sh --load --set '*.platform=linux/amd64'                  # one platform, local engine
#   bash scripts/images.sh --print                                                # the resolved build, no engine
#
# A multi-platform image cannot be loaded into the classic image store: push it (--push) or load one
# platform. Building arm64 on an amd64 host needs QEMU's binfmt handlers and a docker-container builder
# (deploy/README.md, "Images for ARM gateways"). Other arguments go to `docker buildx bake`.
set -euo pipefail
cd "$(dirname "$0")/.."
docker buildx version >/dev/null 2>&1 || { echo "images: docker buildx is not installed" >&2; exit 2; }
IMAGE_TAG=${IMAGE_TAG:-$(cat shared/VERSION)} IMAGE_PREFIX=${IMAGE_PREFIX:-} \
  exec docker buildx bake -f deploy/docker-bake.json "$@"
