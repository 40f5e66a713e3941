#!/bin/sh
# Entry point of the mosquitto service: writes the password file from the environment, then runs the
# broker, so `docker compose up` needs no manual step. Runs as root; mosquitto drops to its own user.
#
#   MQTT_OPERATOR_PASSWORD   user "operator" (reads everything)
#   MQTT_REPLAY_PASSWORD     user "replay" (writes samples and labels of every device)
#   MQTT_DEVICES             device ids, separated by spaces or commas ("dev-1 dev-2 dev-3")
#   MQTT_<ID>_PASSWORD       the password of each device: dev-1 -> MQTT_DEV_1_PASSWORD
#
# Every listed user needs a password; a missing one stops the container with an error.
set -eu

config_dir=${MOSQUITTO_CONFIG_DIR:-/mosquitto/config}
auth_dir=${MOSQUITTO_AUTH_DIR:-/mosquitto/auth}

fail() {
  echo "mosquitto entrypoint: $*" >&2
  exit 1
}

umask 077
mkdir -p "$auth_dir"
passwd_file="$auth_dir/passwd"
rm -f "$passwd_file.new"
created=

add_user() { # user password
  [ -n "$2" ] || fail "no password for MQTT user $1 (set $3)"
  if [ -z "$created" ]; then
    mosquitto_passwd -c -b "$passwd_file.new" "$1" "$2"
    created=1
  else
    mosquitto_passwd -b "$passwd_file.new" "$1" "$2"
  fi
}

add_user operator "${MQTT_OPERATOR_PASSWORD:-}" MQTT_OPERATOR_PASSWORD
add_user replay "${MQTT_REPLAY_PASSWORD:-}" MQTT_REPLAY_PASSWORD
for device in $(echo "${MQTT_DEVICES:-}" | tr ',' ' '); do
  case "$device" in
    operator | replay) fail "device id $device is reserved for another MQTT user" ;;
    *[!A-Za-z0-9_-]* | [!A-Za-z0-9]*) fail "device id $device must match [A-Za-z0-9][A-Za-z0-9_-]*" ;;
  esac
  var="MQTT_$(echo "$device" | tr 'abcdefghijklmnopqrstuvwxyz-' 'ABCDEFGHIJKLMNOPQRSTUVWXYZ_')_PASSWORD"
  eval "password=\${$var:-}"
  add_user "$device" "$password" "$var"
done
mv "$passwd_file.new" "$passwd_file"
cp "$config_dir/acl" "$auth_dir/acl.new"
mv "$auth_dir/acl.new" "$auth_dir/acl"

# The broker runs as the mosquitto user: it must read its auth files and write its persistence store.
if [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1; then
  chown -R mosquitto:mosquitto "$auth_dir"
  [ ! -d /mosquitto/data ] || chown -R mosquitto:mosquitto /mosquitto/data
fi
echo "mosquitto entrypoint: wrote $passwd_file for operator, replay and ${MQTT_DEVICES:-no devices}"
exec "$@"
