#!/usr/bin/env bash
# Enrol (or revoke) a device: broker credentials, and the agent's configuration file.
#
#   deploy/enrol-device.sh DEVICE_ID --passwd FILE --out DIR [--broker mqtts://host:8883] [--ca CA.crt]
#   deploy/enrol-device.sh DEVICE_ID --passwd FILE --revoke
#
# The broker's ACL (deploy/mosquitto/acl) confines every device to fedsentry/v1/agents/<its id>/... by
# pattern, so enrolment adds no ACL line. After a change, the broker rereads its files on SIGHUP
# (`--reload PID` sends it).
set -euo pipefail
id=${1:?usage: enrol-device.sh DEVICE_ID --passwd FILE (--out DIR | --revoke) [--broker URL] [--ca FILE] [--reload PID]}
shift
passwd="" out="" broker="mqtts://fedsentry.local:8883" ca="" revoke=0 reload=""
while [ $# -gt 0 ]; do
  case "$1" in
    --passwd) passwd=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --broker) broker=$2; shift 2 ;;
    --ca) ca=$2; shift 2 ;;
    --reload) reload=$2; shift 2 ;;
    --revoke) revoke=1; shift ;;
    *) echo "enrol-device.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$id" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ ]] || { echo "enrol-device.sh: invalid device id '$id'" >&2; exit 2; }
[ -n "$passwd" ] || { echo "enrol-device.sh: --passwd FILE is required" >&2; exit 2; }
[ "$id" != "fedsentry-coordinator" ] || { echo "enrol-device.sh: that id is the coordinator's" >&2; exit 2; }
touch "$passwd"
if [ "$revoke" = 1 ]; then
  mosquitto_passwd -D "$passwd" "$id"
  echo "revoked $id"
else
  [ -n "$out" ] || { echo "enrol-device.sh: --out DIR is required" >&2; exit 2; }
  secret=$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 40)
  mosquitto_passwd -b "$passwd" "$id" "$secret"
  mkdir -p "$out"
  umask 077
  {
    echo "FEDSENTRY_AGENT_ID=$id"
    echo "FEDSENTRY_BROKER_URL=$broker"
    echo "FEDSENTRY_MQTT_USERNAME=$id"
    echo "FEDSENTRY_MQTT_PASSWORD=$secret"
    [ -n "$ca" ] && echo "FEDSENTRY_CA_CERT=/etc/fedsentry/ca.crt"
  } > "$out/$id.env"
  [ -n "$ca" ] && cp "$ca" "$out/ca.crt"
  echo "enrolled $id: copy $out/$id.env to the device as /etc/fedsentry/agent.env"
fi
if [ -n "$reload" ]; then kill -HUP "$reload"; fi
