#!/usr/bin/env bash
# A private CA and the broker's certificate for the TLS listener.
# usage: deploy/gen-certs.sh OUT_DIR BROKER_HOSTNAME [DAYS] [--group GROUP]
#
# Mosquitto 2 started as root drops to its own user before it reads the key, so the broker's key is
# made readable by GROUP (mode 0640): default `mosquitto` when this host has that group (Debian's
# package); for the compose file's eclipse-mosquitto image give --group 1883 (run as root to chgrp).
# Without such a group the key stays 0600: run Mosquitto as the user who ran this script.
# The CA key (ca.key) stays 0600: the broker never needs it. Keep it off the broker if you can.
set -euo pipefail
usage="usage: gen-certs.sh OUT_DIR BROKER_HOSTNAME [DAYS] [--group GROUP]"
group="" args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --group) group=${2:?$usage}; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
out=${args[0]:?$usage}
host=${args[1]:?$usage}
days=${args[2]:-825}
if [ -z "$group" ] && getent group mosquitto >/dev/null 2>&1; then group=mosquitto; fi
umask 077  # keys are never readable by others, not even for a moment
mkdir -p "$out"
chmod 755 "$out"  # the broker reads the certificates in it; every key keeps its own mode
cd "$out"
[ -f ca.key ] || openssl req -x509 -newkey rsa:3072 -nodes -keyout ca.key -out ca.crt -days 3650 \
  -subj "/CN=FedSentry CA" 2>/dev/null
openssl req -newkey rsa:3072 -nodes -keyout server.key -out server.csr -subj "/CN=$host" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\n' "$host" > san.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days "$days" \
  -extfile san.ext 2>/dev/null
rm -f server.csr san.ext
chmod 600 ca.key
chmod 644 ca.crt server.crt
if [ -n "$group" ]; then
  chgrp "$group" server.key || { echo "gen-certs.sh: cannot give server.key to group $group (run as root?)" >&2; exit 1; }
  chmod 640 server.key
  keynote="readable by group $group"
else
  chmod 600 server.key
  keynote="readable by $(id -un) only: run Mosquitto as that user, or give --group"
fi
echo "CA: $out/ca.crt (give it to every device); broker: $out/server.crt, $out/server.key ($keynote)"
