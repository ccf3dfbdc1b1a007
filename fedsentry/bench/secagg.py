"""`fedsentry bench secagg`: what private mode's secure aggregation (models.private.secagg, SecAgg+) costs one round:
each device's CPU and bytes beside the plaintext float32 upload, and the coordinator's CPU to unmask the sum, with
a share of the devices dropping before they upload (the costly case: their pairwise masks are rebuilt)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from fedsentry.errors import UsageError
from fedsentry.output import write_json

#: the largest upload the bench measures (values): a job's upload is bounded far below (models.jobspec)
MAX_VALUES = 4_000_000


def measure(devices: int, length: int, dropout: float, seed: int = 0) -> dict[str, Any]:
    from models.private.fixedpoint import Ring
    from models.private.secagg import Setup, secure_sum

    setup = Setup(b"bench-secagg", tuple(range(devices)), length, Ring.for_sum(100.0, devices), seed)
    rng = np.random.default_rng(seed)
    values = {i: rng.normal(size=length) for i in range(devices)}
    gone = frozenset(rng.choice(devices, int(round(dropout * devices)), replace=False).tolist())
    total, survivors, log = secure_sum(setup, values, gone_before_upload=gone)
    exact = sum(values[i] for i in survivors)
    uploaded = [log.sent[i] for i in survivors]
    return {"devices": devices, "values": length, "dropped_before_upload": len(gone), "degree": setup.degree,
            "threshold": setup.threshold, "ring_bits": setup.ring.bits, "fraction_bits": setup.ring.frac,
            "device_cpu_s_median": float(np.median([log.cpu[i] for i in survivors])),
            "device_cpu_s_max": float(max(log.cpu[i] for i in survivors)),
            "server_cpu_s": log.server_cpu, "upload_bytes_per_device_round": int(np.median(uploaded)),
            "plaintext_float32_bytes": 4 * length, "ratio": float(np.median(uploaded)) / (4 * length),
            "max_abs_error": float(np.abs(total - exact).max())}


def run(args: argparse.Namespace) -> int:
    if min(args.devices) < 2:
        raise UsageError("--devices: a secure sum needs at least 2 devices")
    if args.values > MAX_VALUES:
        raise UsageError(f"--values: at most {MAX_VALUES:,} (an upload of {4 * MAX_VALUES // 2**20} MiB as float32)")
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
