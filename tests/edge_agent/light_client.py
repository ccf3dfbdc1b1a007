"""A device's MQTT client in a fresh interpreter (as an agent's process has it), run by the tests:
`python -m tests.edge_agent.light_client URL TOPIC [--subscribe] [--user U --password P --ca FILE]` publishes
messages large enough that the socket's reads and writes would block part-way (paho's `except ssl....` clauses
are evaluated then) and prints, as JSON, how many were confirmed and received, and which TLS, proxy and
WebSocket modules the process imported."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from wire.mqtt import make_client

WATCHED = ("ssl", "_ssl", "_hashlib", "hashlib", "urllib.request", "http.client", "email")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("topic")
    ap.add_argument("--subscribe", action="store_true", help="subscribe to the topic and count what comes back")
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--ca")
    ap.add_argument("--messages", type=int, default=20)
    ap.add_argument("--size", type=int, default=256 * 1024)
    args = ap.parse_args()
    client, b = make_client(f"light-{args.topic.replace('/', '-')}", args.url, args.user, args.password,
                            ca_cert=args.ca, clean_session=True)
    connected, done = threading.Event(), threading.Event()
    counts = {"confirmed": 0, "received": 0}
    expected = args.messages * (2 if args.subscribe else 1)

    def tally(key: str) -> None:
        counts[key] += 1
        if counts["confirmed"] + counts["received"] >= expected:
            done.set()

    def on_connect(c, userdata, flags, reason_code, properties):
        if args.subscribe:
            c.subscribe(args.topic, qos=1)
        connected.set()

    client.on_connect = on_connect
    client.on_publish = lambda c, userdata, mid, reason_code, properties: tally("confirmed")
    client.on_message = lambda c, userdata, message: tally("received")
    client.connect(b.host, b.port)
    client.loop_start()
    ok = connected.wait(20)
    if ok:
        for i in range(args.messages):
            client.publish(args.topic, bytes([i % 256]) * args.size, qos=1)
        ok = done.wait(60)
    client.disconnect()
    client.loop_stop()
    print(json.dumps({"connected": connected.is_set(), **counts,
                      "imported": sorted(m for m in WATCHED if m in sys.modules)}))


if __name__ == "__main__":
    main()
