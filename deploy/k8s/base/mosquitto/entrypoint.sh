#!/bin/sh
# Entry point of the mosquitto service: writes the password file from the environment, then runs the
# broker, so `docker compose up` needs no manual step. Runs as root; mosquitto drops to its own user.
#
#   EDGEDRIFT_MODE           production (the default) or development: production refuses any password
#                            that is a placeholder, a development default (contains "insecure") or
#                            shorter than 16 characters, of fewer than 5 distinct characters or a
#                            repeated pattern, as the cloud trainer and the agents do
#   MQTT_OPERATOR_PASSWORD   user "operator" (reads everything)
#   MQTT_REPLAY_PASSWORD     user "replay" (writes samples and labels of every device)
#   MQTT_DEVICES             device ids, separated by spaces or commas ("dev-1 dev-2 dev-3")
#   MQTT_<ID>_PASSWORD       the password of each device: dev-1 -> MQTT_DEV_1_PASSWORD
#   MQTT_GATEWAYS            gateway ids ("gw-1 gw-2"); each logs in as itself and its ACL grants exactly
#                            the topics of the devices in MQTT_<ID>_DEVICES (gw-1 -> MQTT_GW_1_DEVICES)
#                            plus its own status topic edgedrift/gateways/<id>/status
#   MQTT_<ID>_PASSWORD       the password of each gateway, as for devices
#   MQTT_<ID>_SESSIONS       gateway (the default when unset or empty) or device: with device, the gateway
#                            also gets one user per device in MQTT_<ID>_DEVICES, "<id>.<device>"
#                            (gw-1.dev-1) with the gateway's password, whose ACL grants exactly that
#                            device's topics (an agent started with --broker-sessions device opens one
#                            MQTT session, hence one broker queue, per device)
#
# Each password may instead be a file: MQTT_OPERATOR_PASSWORD_FILE=/run/secrets/mqtt_operator (Docker
# and Kubernetes secrets; one trailing newline is dropped; an empty MQTT_..._PASSWORD counts as unset).
# Every listed user needs a password; a missing, unreadable or refused one stops the container with an
# error that names the variable, never the password. The user "healthcheck" (reads $SYS/broker/uptime
# only, for the compose healthcheck) gets a random password at every start, kept in $auth_dir/healthcheck.
set -eu

config_dir=${MOSQUITTO_CONFIG_DIR:-/mosquitto/config}
auth_dir=${MOSQUITTO_AUTH_DIR:-/mosquitto/auth}

fail() {
  echo "mosquitto entrypoint: $*" >&2
  exit 1
}

mode=${EDGEDRIFT_MODE:-production}
case "$mode" in
  development | production) ;;
  *) fail "EDGEDRIFT_MODE must be development or production" ;;
esac
nl='
'
cr=$(printf '\r')

password_of() { # VARIABLE: sets $password from VARIABLE or from the file VARIABLE_FILE names
  eval "value=\${$1:-}; file=\${$1_FILE:-}"
  if [ -z "$file" ]; then
    password=$value
    return 0
  fi
  [ -z "$value" ] || fail "set either $1 or $1_FILE, not both"
  { [ -f "$file" ] && [ -r "$file" ]; } || fail "$1_FILE: cannot read $file"
  password=$(cat "$file" && printf x) || fail "$1_FILE: cannot read $file"
  password=${password%x}
  case "$password" in
    *"$nl") password=${password%"$nl"}; password=${password%"$cr"} ;;
  esac
  [ -n "$password" ] || fail "$1_FILE: $file is empty"
}

refuse_weak() { # VARIABLE PASSWORD: in production, the same rule as edgedrift.secrets.weak_secret_reason
  [ "$mode" = production ] || return 0
  hint="(production mode: set a real password, or EDGEDRIFT_MODE=development)"
  case "$(printf '%s' "$2" | tr 'A-Z' 'a-z')" in
    *insecure* | *change-me* | *changeme* | *replace-with* | *replace-me* | secret | password | dev | development)
      fail "refusing to start: $1 is a placeholder or a development default $hint" ;;
  esac
  length=${#2}
  [ "$length" -ge 16 ] || fail "refusing to start: $1 is shorter than 16 characters $hint"
  weak=$(printf '%s\n' "$2" | awk '{
    n = length($0); d = 0
    for (i = 1; i <= n; i++) { c = substr($0, i, 1); if (!(c in seen)) { seen[c] = 1; d++ } }
    if (d < 5) { print "uses fewer than 5 distinct characters"; exit }
    for (p = 1; p <= n / 2; p++) if (substr($0, p + 1) == substr($0, 1, n - p)) { print "repeats a shorter pattern"; exit }
  }')
  [ -z "$weak" ] || fail "refusing to start: $1 $weak $hint"
}

umask 077
mkdir -p "$auth_dir"
passwd_file="$auth_dir/passwd"
# The users go into a plain "user:password" file (mode 600: umask 077) that one `mosquitto_passwd -U`
# hashes in place at the end: one `mosquitto_passwd -b` per user rewrites the whole file every time
# (5.8 s for 1,000 users; 0.1 s with -U). -U cuts a password at a second ":" and trims blanks around it,
# so such passwords are hashed by -b into a second file, appended after the conversion. Neither file
# outlives a failed start.
plain_file="$passwd_file.new"
hashed_file="$passwd_file.hashed"
trap 'rm -f "$plain_file" "$plain_file.tmp" "$hashed_file" "$hashed_file.tmp" "$auth_dir/acl.new"' EXIT
trap 'exit 1' HUP INT TERM
rm -f "$plain_file" "$plain_file.tmp" "$hashed_file" "$hashed_file.tmp"
: >"$plain_file"
blanks=$(printf ' \t\r\v\f')
added=' '

add_user() { # user password variable [checked]: "checked" when the password passed refuse_weak already
  [ -n "$2" ] || fail "no password for MQTT user $1 (set $3 or $3_FILE)"
  case "$added" in *" $1 "*) return 0 ;; esac # listed twice: the same variable, the same password
  added="$added$1 "
  [ "$1" = healthcheck ] || [ "${4:-}" = checked ] || refuse_weak "$3" "$2"
  case "$2" in
    *:* | *"$nl"* | ["$blanks"]* | *["$blanks"])
      if [ -f "$hashed_file" ]; then
        mosquitto_passwd -b "$hashed_file" "$1" "$2"
      else
        mosquitto_passwd -c -b "$hashed_file" "$1" "$2"
      fi ;;
    *) printf '%s:%s\n' "$1" "$2" >>"$plain_file" ;;
  esac
}

acl() { # FORMAT ARGUMENTS...: appended to the copied ACL
  # shellcheck disable=SC2059 # the format is the caller's
  printf "$@" >>"$auth_dir/acl.new"
}

password_of MQTT_OPERATOR_PASSWORD
add_user operator "$password" MQTT_OPERATOR_PASSWORD
password_of MQTT_REPLAY_PASSWORD
add_user replay "$password" MQTT_REPLAY_PASSWORD
for device in $(echo "${MQTT_DEVICES:-}" | tr ',' ' '); do
  case "$device" in
    operator | replay | healthcheck) fail "device id $device is reserved for another MQTT user" ;;
    *[!A-Za-z0-9_-]* | [!A-Za-z0-9]*) fail "device id $device must match [A-Za-z0-9][A-Za-z0-9_-]*" ;;
  esac
  var="MQTT_$(echo "$device" | tr 'abcdefghijklmnopqrstuvwxyz-' 'ABCDEFGHIJKLMNOPQRSTUVWXYZ_')_PASSWORD"
  password_of "$var"
  add_user "$device" "$password" "$var"
done
cp "$config_dir/acl" "$auth_dir/acl.new"
session_users=0
for gateway in $(echo "${MQTT_GATEWAYS:-}" | tr ',' ' '); do
  case "$gateway" in
    operator | replay | healthcheck | gateways) fail "gateway id $gateway is reserved for another MQTT user" ;;
    *[!A-Za-z0-9_-]* | [!A-Za-z0-9]*) fail "gateway id $gateway must match [A-Za-z0-9][A-Za-z0-9_-]*" ;;
  esac
  case " $(echo "${MQTT_DEVICES:-}" | tr ',' ' ') " in
    *" $gateway "*) fail "gateway id $gateway is also a device id" ;;
  esac
  name=$(echo "$gateway" | tr 'abcdefghijklmnopqrstuvwxyz-' 'ABCDEFGHIJKLMNOPQRSTUVWXYZ_')
  sessions='' served='' # set by eval
  eval "sessions=\${MQTT_${name}_SESSIONS:-gateway}"
  case "$sessions" in
    gateway | device) ;;
    *) fail "MQTT_${name}_SESSIONS must be gateway or device (got '$sessions')" ;;
  esac
  password_of "MQTT_${name}_PASSWORD"
  add_user "$gateway" "$password" "MQTT_${name}_PASSWORD"
  eval "served=\${MQTT_${name}_DEVICES:-}"
  acl '\n# gateway %s (generated by entrypoint.sh from MQTT_%s_DEVICES)\nuser %s\n' "$gateway" "$name" "$gateway"
  acl 'topic write edgedrift/gateways/%s/status\n' "$gateway"
  for device in $(echo "$served" | tr ',' ' '); do
    case "$device" in
      *[!A-Za-z0-9_-]* | [!A-Za-z0-9]*) fail "MQTT_${name}_DEVICES: $device must match [A-Za-z0-9][A-Za-z0-9_-]*" ;;
    esac
    acl 'topic read edgedrift/%s/%s\n' "$device" samples "$device" labels
    acl 'topic write edgedrift/%s/%s\n' "$device" predictions "$device" events "$device" status
  done
  [ "$sessions" = device ] || continue
  # A session per device: the user <gateway>.<device> (device ids have no dot, so it is neither a device's
  # user nor a %u of the ACL's patterns) with the gateway's password and exactly that device's topics.
  for device in $(echo "$served" | tr ',' ' '); do
    case "$added" in *" $gateway.$device "*) continue ;; esac
    add_user "$gateway.$device" "$password" "MQTT_${name}_PASSWORD" checked
    session_users=$((session_users + 1))
    acl '\n# device session of gateway %s (MQTT_%s_SESSIONS=device)\nuser %s.%s\n' \
      "$gateway" "$name" "$gateway" "$device"
    acl 'topic read edgedrift/%s/%s\n' "$device" samples "$device" labels
    acl 'topic write edgedrift/%s/%s\n' "$device" predictions "$device" events "$device" status
  done
done
# The healthcheck logs in as its own user: with use_username_as_clientid (mosquitto.conf) every login of
# a user has the same client id, so a healthcheck logged in as the operator would disconnect the operator.
health=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
add_user healthcheck "$health" healthcheck
mosquitto_passwd -U "$plain_file" # hashes every line in place (the file keeps its mode, 600)
if [ -f "$hashed_file" ]; then
  cat "$hashed_file" >>"$plain_file"
  rm -f "$hashed_file"
fi
printf '%s\n' "$health" >"$auth_dir/healthcheck.new"
mv "$auth_dir/healthcheck.new" "$auth_dir/healthcheck"
mv "$plain_file" "$passwd_file"
mv "$auth_dir/acl.new" "$auth_dir/acl"

# Mutual TLS (tls.conf): with the fleet's CA, the broker's certificate and its key mounted at
# /mosquitto/certs (make-certs.sh), the TLS listeners are included; without them, none is.
certs_dir=${MOSQUITTO_CERTS_DIR:-/mosquitto/certs}
rm -rf "$auth_dir/conf.d" "$auth_dir/certs"
mkdir -p "$auth_dir/conf.d"
if [ -f "$certs_dir/ca.crt" ] && [ -f "$certs_dir/server.crt" ] && [ -f "$certs_dir/server.key" ]; then
  mkdir -p "$auth_dir/certs"
  cp "$certs_dir/ca.crt" "$certs_dir/server.crt" "$certs_dir/server.key" "$auth_dir/certs/"
  cp "$config_dir/tls.conf" "$auth_dir/conf.d/tls.conf"
  echo "mosquitto entrypoint: mutual-TLS listeners on 8883 (mqtts) and 8884 (wss)"
fi

# The broker runs as the mosquitto user: it must read its auth files and write its persistence store.
if [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1; then
  chown -R mosquitto:mosquitto "$auth_dir"
  [ ! -d /mosquitto/data ] || chown -R mosquitto:mosquitto /mosquitto/data
fi
echo "mosquitto entrypoint: wrote $passwd_file for operator, replay, healthcheck, ${MQTT_DEVICES:-no devices} and ${MQTT_GATEWAYS:-no gateways}, $session_users device sessions of gateways ($mode mode)"
exec "$@"
