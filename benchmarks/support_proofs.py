"""The cost of the support rows' bit proofs (issue 23 point 3; models.private.bitproofs), per secure sum of a mixture
round: K entries a row (one per component), N devices.

- device CPU: one device's answer (K fresh commitments, K bit proofs, the blinding changes), median of 5 devices;
- coordinator CPU: checking one device's K proofs (median of `--sample` devices, times N: every device's proofs are
  checked the same way), plus the sum check over all N devices (the N x K change commitments added up and compared
  with the decoded sum), measured whole;
- bytes per device: in the clear, K commitments (32 bytes) and K proofs (128); in the masked upload, K blinding
  changes as limbs (`limbs_per_scalar` of the round's ring, 5 bytes each in the 40-bit ring).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/support_proofs.py --devices 100 1000 \
        --components 64 128 --json benchmarks/results/support-proofs.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from models.private import bitproofs as bp
from models.private.fixedpoint import Ring


def measure(devices: int, components: int, sample: int, clip: float) -> dict[str, Any]:
    rng = np.random.default_rng(devices + components)
    ring = Ring.for_sum(clip, devices)
    answers, device_cpu = [], []
    for i in range(max(sample, 5)):
        row = bp.SecretRow.empty(components)
        bits = rng.integers(0, 2, components).tolist()
        t = time.process_time()
        answer, _ = row.answer(bits, bp.context("bench", 1, i))
        device_cpu.append(time.process_time() - t)
        answers.append((bits, answer))
    verify = []
    kept = bp.KeptRows(components)
    for i, (_, answer) in enumerate(answers[:sample]):
        t = time.process_time()
        commitments = bp.verify_row(answer.commitments, answer.proofs, bp.context("bench", 1, i), components)
        kept.change(i, commitments)
        verify.append(time.process_time() - t)
    # the sum check over every device: the sample's rows repeated to N devices (the work is the same additions)
    changes = [answers[i % len(answers)][1].commitments for i in range(devices)]
    totals = [sum(answers[i % len(answers)][0][j] for i in range(devices)) for j in range(components)]
    blindings = [sum(answers[i % len(answers)][1].blinding_change[j] for i in range(devices)) % bp.ORDER
                 for j in range(components)]
    t = time.process_time()
    bad = bp.sum_mismatches(changes, totals, blindings)
    check = time.process_time() - t
    assert not bad
    limbs = bp.limbs_per_scalar(ring)
    clear = components * (bp.POINT_BYTES + bp.PROOF_BYTES)
    masked = components * limbs * ring.width
    return {"devices": devices, "components": components, "ring_frac": ring.frac, "limb_bits": bp.limb_bits(ring),
            "limbs_per_scalar": limbs, "device_cpu_seconds": float(np.median(device_cpu)),
            "verify_cpu_seconds_per_device": float(np.median(verify)), "verified_sample": sample,
            "sum_check_cpu_seconds": check,
            "coordinator_cpu_seconds": float(np.median(verify)) * devices + check,
            "bytes_clear_per_device": clear, "bytes_masked_per_device": masked,
            "bytes_per_device": clear + masked}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--components", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--sample", type=int, default=20, help="devices whose proofs are verified (times N)")
    ap.add_argument("--clip", type=float, default=5.0, help="the round's clip (a private mixture's largest weight)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    rows = []
    for n in args.devices:
        for k in args.components:
            rows.append(measure(n, k, args.sample, args.clip))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "python benchmarks/support_proofs.py " + " ".join(
                [f"--devices {' '.join(map(str, args.devices))}", f"--components {' '.join(map(str, args.components))}",
                 f"--sample {args.sample}", f"--clip {args.clip:g}"]), "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
