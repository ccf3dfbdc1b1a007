#!/usr/bin/env bash
# A private CA and the broker's certificate for the TLS listener.
# usage: deploy/gen-certs.sh OUT_DIR BROKER_HOSTNAME [DAYS]
set -euo pipefail
out=${1:?usage: gen-certs.sh OUT_DIR BROKER_HOSTNAME [DAYS]}
host=${2:?usage: gen-certs.sh OUT_DIR BROKER_HOSTNAME [DAYS]}
days=${3:-825}
mkdir -p "$out"
cd "$out"
[ -f ca.key ] || openssl req -x509 -newkey rsa:3072 -nodes -keyout ca.key -out ca.crt -days 3650 \
  -subj "/CN=FedSentry CA" 2>/dev/null
openssl req -newkey rsa:3072 -nodes -keyout server.key -out server.csr -subj "/CN=$host" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\n' "$host" > san.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days "$days" \
  -extfile san.ext 2>/dev/null
rm -f server.csr san.ext
chmod 600 ca.key server.key
echo "CA: $out/ca.crt (give it to every device); broker: $out/server.crt, $out/server.key"
