#!/usr/bin/env bash
# Enrol (or revoke) a device: broker credentials, and the agent's configuration files.
#
#   deploy/enrol-device.sh DEVICE_ID --passwd FILE --out DIR [--broker mqtts://host:8883] [--ca CA.crt]
#                          [--group GROUP]
#   deploy/enrol-device.sh DEVICE_ID --passwd FILE --revoke
#
# Writes DIR/ID.env (the agent's settings, /etc/fedsentry/agent.env on the device) and DIR/ID.mqtt-password
# (its password alone, mode 0600: /etc/fedsentry/mqtt-password, which the systemd unit hands to the
# agent as a credential). The password never appears on a command line. A new password FILE is made
# readable by GROUP (mode 0640; default `mosquitto` when this host has that group, 1883 for the compose
# file's image): Mosquitto 2 reads it after dropping root.
#
# The broker's ACL (deploy/mosquitto/acl) confines every device to fedsentry/v1/agents/<its id>/... by
# pattern, so enrolment adds no ACL line. After a change, the broker rereads its files on SIGHUP
# (`--reload PID` sends it).
set -euo pipefail
id=${1:?usage: enrol-device.sh DEVICE_ID --passwd FILE (--out DIR | --revoke) [--broker URL] [--ca FILE] [--group G] [--reload PID]}
shift
passwd="" out="" broker="mqtts://fedsentry.local:8883" ca="" revoke=0 reload="" group=""
while [ $# -gt 0 ]; do
  case "$1" in
    --passwd) passwd=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --broker) broker=$2; shift 2 ;;
    --ca) ca=$2; shift 2 ;;
    --group) group=$2; shift 2 ;;
    --reload) reload=$2; shift 2 ;;
    --revoke) revoke=1; shift ;;
    *) echo "enrol-device.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$id" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ ]] || { echo "enrol-device.sh: invalid device id '$id'" >&2; exit 2; }
[ -n "$passwd" ] || { echo "enrol-device.sh: --passwd FILE is required" >&2; exit 2; }
[ "$id" != "fedsentry-coordinator" ] || { echo "enrol-device.sh: that id is the coordinator's" >&2; exit 2; }
case "$broker" in *://*:*@*) echo "enrol-device.sh: give --broker without a password" >&2; exit 2 ;; esac
umask 077
if [ ! -e "$passwd" ]; then
  : > "$passwd"
  if [ -z "$group" ] && getent group mosquitto >/dev/null 2>&1; then group=mosquitto; fi
  if [ -n "$group" ]; then chgrp "$group" "$passwd" && chmod 640 "$passwd"; fi
fi
if [ "$revoke" = 1 ]; then
  mosquitto_passwd -D "$passwd" "$id"
  echo "revoked $id"
else
  [ -n "$out" ] || { echo "enrol-device.sh: --out DIR is required" >&2; exit 2; }
  secret=$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 40)
  # on stdin (printf is a shell builtin): `mosquitto_passwd -b` would show it in the process list
  printf '%s\n%s\n' "$secret" "$secret" | mosquitto_passwd "$passwd" "$id" >/dev/null
  mkdir -p "$out"
  printf '%s\n' "$secret" > "$out/$id.mqtt-password"
  {
    echo "FEDSENTRY_AGENT_ID=$id"
    echo "FEDSENTRY_BROKER_URL=$broker"
    echo "FEDSENTRY_MQTT_USERNAME=$id"
    echo "FEDSENTRY_MQTT_PASSWORD_FILE=/etc/fedsentry/mqtt-password"
    if [ -n "$ca" ]; then echo "FEDSENTRY_CA_CERT=/etc/fedsentry/ca.crt"; fi
  } > "$out/$id.env"
  if [ -n "$ca" ]; then cp "$ca" "$out/ca.crt"; fi
  echo "enrolled $id: copy $out/$id.env to the device as /etc/fedsentry/agent.env and $out/$id.mqtt-password" \
       "as /etc/fedsentry/mqtt-password (mode 0600)"
fi
if [ -n "$reload" ]; then kill -HUP "$reload"; fi
