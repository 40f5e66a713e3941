#!/bin/sh
# The official image's entry point, reduced to what the compose override uses: initialise PGDATA once
# (user, password, database from POSTGRES_*), then run the server as the postgres user on all addresses.
set -eu
[ "${1:-}" = postgres ] || exec "$@"
shift
password=${POSTGRES_PASSWORD:-}
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
  password=$(cat "$POSTGRES_PASSWORD_FILE")
fi
[ -n "$password" ] || { echo "postgres stand-in: set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE" >&2; exit 1; }
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
as_postgres() { runuser -u postgres -- "$@"; }
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 0700 "$PGDATA"
else
  as_postgres() { "$@"; }
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$password" >"$pwfile"
  chown postgres "$pwfile" 2>/dev/null || true
  as_postgres initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-host=scram-sha-256 --auth-local=trust \
    -E UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  printf "host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    as_postgres postgres --single -D "$PGDATA" -j postgres <<SQL >/dev/null
CREATE DATABASE "$db" OWNER "$user";
SQL
  fi
  echo "postgres stand-in: initialised $PGDATA (user $user, database $db)"
fi
if [ "$(id -u)" = 0 ]; then
  exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
