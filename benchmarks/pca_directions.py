"""Would the mixture's support rule, carried over to PCA's directions, keep a compliant rogue's attacks out of the
fleet's subspace (issue 22, point 1)? For each fleet, the FedPG run `fedsentry simulate pca --detector pca` makes
(60 rounds, 10 % a round, seed 0, non-i.i.d.) and, per direction z_j of its consensus Z:

- support: the devices holding more than an isotropic share of their variance on it (z_j' C_i z_j >= tr(C_i) / d,
  the analogue of a device holding SUPPORT_SHARE of its records in a component);
- heaviest 2: the share of the direction's weighted energy (sum_i w_i z_j' C_i z_j) the 2 heaviest devices hold
  (the mixture's mass share, whose cap is 0.8);
- rogues: the share the compliant rogues hold.

    nice -n 10 python benchmarks/pca_directions.py

Writes benchmarks/results/pca-directions.md (findings there and in docs/robustness.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from fedsentry.cli import build_parser
from fedsentry.runs.detection import prepare
from models.pca import make_algorithm
from models.pca.simulator import prepare_clients, run_federated

FLEETS = ((0, 21), (2, 21), (0, 11), (1, 11))
RANK, ROUNDS, FRACTION = 3, 60, 0.1


def directions(dataset: str, adversaries: int, clients: int) -> dict[str, list[float]]:
    flags = ["simulate", "pca", "--detector", "pca", "--dataset", dataset, "--clients", str(clients)]
    if adversaries:
        flags += ["--adversaries", str(adversaries), "--attack", "compliant"]
    args = build_parser().parse_args(flags)
    data, _, parts = prepare(args)
    fleet = prepare_clients(parts, data.feature_names)
    d = fleet.C.shape[1]
    Z = run_federated(make_algorithm("fedpg", d, RANK), fleet, ROUNDS, FRACTION, 0).Z
    energy = np.einsum("jk,bjl,lk->bk", Z, fleet.C, Z)  # (devices, directions)
    share = energy / np.trace(fleet.C, axis1=1, axis2=2)[:, None]
    mass = fleet.weight[:, None] * energy
    total = mass.sum(axis=0)
    return {"support": (share >= 1.0 / d).sum(axis=0).tolist(),
            "heaviest_2": (-np.sort(-mass, axis=0)[:2].sum(axis=0) / total).tolist(),
            "rogues": (mass[:adversaries].sum(axis=0) / total).tolist()}


def main() -> int:
    logging.disable(logging.WARNING)
    lines = ["# PCA directions: support and mass share (benchmarks/pca_directions.py)", "",
             f"FedPG, rank {RANK}, {ROUNDS} rounds, {FRACTION:g} a round, seed 0, non-i.i.d.; compliant rogues. Per "
             "direction of the consensus: devices holding at least 1/d of their variance on it, the share of its "
             "weighted energy the 2 heaviest devices hold, and the rogues' share.", "",
             "| data | rogues / devices | support | heaviest 2 | rogues |", "|---|---|---|---|---|"]
    for dataset in ("nsl-kdd", "synthetic"):
        for k, n in FLEETS:
            r = directions(dataset, k, n)
            cells = [", ".join(f"{v:.2f}" for v in r[key]) for key in ("heaviest_2", "rogues")]
            lines.append(f"| {dataset} | {k} / {n} | {', '.join(str(v) for v in r['support'])} | {cells[0]} | "
                         f"{cells[1]} |")
            print(lines[-1], flush=True)
    Path("benchmarks/results/pca-directions.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
