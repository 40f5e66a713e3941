#!/bin/sh
# Certificates for the broker's mutual-TLS listener (tls.conf): a CA, the broker's server certificate and
# one client certificate per device or gateway, each with the id as its common name (the broker then uses
# it as the user name: use_identity_as_username, so the ACL applies as for passwords).
#
#   deploy/mosquitto/make-certs.sh OUT_DIR SERVER_NAME [ID ...]
#
#   OUT_DIR       written: ca.crt ca.key server.crt server.key <id>.crt <id>.key (keys mode 600); an
#                 existing ca.crt/ca.key is reused, so devices can be added to a fleet later
#   SERVER_NAME   the broker's host name or IP address, as the clients reach it (its subjectAltName)
#   ID            device or gateway ids (dev-1 gw-1 ...)
#
# Environment: DAYS (validity, default 825), KEY_BITS (RSA, default 2048). A test fleet's tool: a real
# fleet keeps its CA key offline, or uses the cloud provider's CA (AWS IoT Core issues device certificates).
set -eu

[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR SERVER_NAME [ID ...]" >&2; exit 2; }
out=$1
server=$2
shift 2
days=${DAYS:-825}
bits=${KEY_BITS:-2048}
mkdir -p "$out"
umask 077

if [ ! -f "$out/ca.crt" ] || [ ! -f "$out/ca.key" ]; then
  openssl req -x509 -newkey "rsa:$bits" -nodes -days "$days" -subj "/CN=edgedrift-test-ca" \
    -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null
fi

case "$server" in
  *[!0-9.]*) case "$server" in *:*) san="IP:$server" ;; *) san="DNS:$server" ;; esac ;;
  *) san="IP:$server" ;;
esac

sign() { # NAME CN EXTENSIONS: NAME.key and NAME.crt signed by the CA
  openssl req -newkey "rsa:$bits" -nodes -subj "/CN=$2" -keyout "$out/$1.key" -out "$out/$1.csr" 2>/dev/null
  printf '%s\n' "$3" > "$out/$1.ext"
  openssl x509 -req -in "$out/$1.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial \
    -days "$days" -extfile "$out/$1.ext" -out "$out/$1.crt" 2>/dev/null
  rm -f "$out/$1.csr" "$out/$1.ext"
}

sign server "$server" "subjectAltName=$san
extendedKeyUsage=serverAuth"
for id in "$@"; do
  case "$id" in
    server | ca | *[!A-Za-z0-9._-]*) echo "$0: $id is not a device or gateway id" >&2; exit 2 ;;
  esac
  sign "$id" "$id" "extendedKeyUsage=clientAuth"
done
chmod 644 "$out"/*.crt
echo "certificates in $out: ca.crt, server.crt/.key${*:+, }$(printf '%s.crt/.key ' "$@")"
