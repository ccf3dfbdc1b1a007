"""`fedsentry bench secagg`: what private mode's secure aggregation (models.private.secagg, SecAgg+) costs one round:
each device's CPU and bytes beside the plaintext float32 upload, and the coordinator's CPU to unmask the sum, with
a share of the devices dropping before they upload (the costly case: their pairwise masks are rebuilt)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from fedsentry.output import write_json


def measure(devices: int, length: int, dropout: float, seed: int = 0) -> dict[str, Any]:
    from models.private.fixedpoint import Ring
    from models.private.secagg import Client, Server, Setup

    setup = Setup(b"bench-secagg", tuple(range(devices)), length, Ring.for_sum(100.0, devices), seed)
    server, clients = Server(setup), {i: Client(setup, i) for i in range(devices)}
    cpu = dict.fromkeys(range(devices), 0.0)
    sent = dict.fromkeys(range(devices), 0)
    server_cpu = 0.0

    def on_client(i: int, f: Any, *args: Any) -> Any:
        t = time.process_time()
        out = f(*args)
        cpu[i] += time.process_time() - t
        return out

    def on_server(f: Any, *args: Any) -> Any:
        nonlocal server_cpu
        t = time.process_time()
        out = f(*args)
        server_cpu += time.process_time() - t
        return out

    advertised = {i: on_client(i, c.advertise) for i, c in clients.items()}
    handed = on_server(server.hand_keys, advertised)
    shares = {i: on_client(i, clients[i].share, handed[i]) for i in handed}
    for i in range(devices):
        sent[i] += 96 + sum(len(ct) for ct in shares[i].values())
    for i, incoming in on_server(server.route, shares).items():
        on_client(i, clients[i].receive, incoming)
    rng = np.random.default_rng(seed)
    values = {i: rng.normal(size=length) for i in range(devices)}
    gone = set(rng.choice(devices, int(round(dropout * devices)), replace=False).tolist())
    uploads = {i: on_client(i, clients[i].upload, values[i], rng) for i in range(devices) if i not in gone}
    survivors, dropped = on_server(server.collect, uploads)
    reveals = {i: on_client(i, clients[i].unmask, survivors, dropped) for i in survivors}
    total = on_server(server.finish, reveals)
    for i in survivors:
        sent[i] += len(uploads[i]) + sum(len(s) + 8 for s in reveals[i].values())
    exact = sum(values[i] for i in survivors)
    uploaded = [sent[i] for i in survivors]
    return {"devices": devices, "values": length, "dropped_before_upload": len(gone), "degree": setup.degree,
            "threshold": setup.threshold, "ring_bits": setup.ring.bits, "fraction_bits": setup.ring.frac,
            "device_cpu_s_median": float(np.median([cpu[i] for i in survivors])),
            "device_cpu_s_max": float(max(cpu[i] for i in survivors)),
            "server_cpu_s": server_cpu, "upload_bytes_per_device_round": int(np.median(uploaded)),
            "plaintext_float32_bytes": 4 * length, "ratio": float(np.median(uploaded)) / (4 * length),
            "max_abs_error": float(np.abs(total - exact).max())}


def run(args: argparse.Namespace) -> int:
    rows = [measure(n, args.values, args.dropout) for n in args.devices]
    print("| devices | dropped before upload | k / t | device CPU s (median, max) | coordinator CPU s | bytes per "
          "device | x float32 | max error |")
    print("|---:|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['devices']} | {r['dropped_before_upload']} | {r['degree']} / {r['threshold']} | "
              f"{r['device_cpu_s_median']:.3f}, {r['device_cpu_s_max']:.3f} | {r['server_cpu_s']:.2f} | "
              f"{r['upload_bytes_per_device_round']:,} | {r['ratio']:.2f} | {r['max_abs_error']:.1e} |")
    if args.json:
        write_json({"values": args.values, "dropout": args.dropout, "rows": rows}, args.json)
    return 0
