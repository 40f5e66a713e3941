#!/bin/sh
# The official image's entry point, reduced to what the compose stack uses: flags alone run redis-server,
# and the server runs with protected mode off (the official image compiles it off).
set -eu
case "${1:-}" in -*) set -- redis-server "$@" ;; esac
[ "${1:-}" = redis-server ] || exec "$@"
exec "$@" --protected-mode no
