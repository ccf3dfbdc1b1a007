"""PCA's support rule (issue 22): records no other device's traffic explains do not shape the shared subspace.

A compliant rogue's attacks tilt the fleet's shared directions rather than own one
(benchmarks/results/pca-directions.md), so a rule on directions cannot see them; this one works on records. Once,
after the warm-up rounds, each device scores its records against the subspace of the *other* devices' statistics:
the fleet's weighted sum less its own and less that of the `colluders` - 1 devices (the threshold's count of devices
that may act together, less itself) whose statistics explain most of its own (`partner`). The records there above
the fleet's label-free threshold (those the fleet would flag, were they not in the device's own training set) are
kept out of its statistic from then on. An honest device's unusual records are left out as the rogue's attacks are:
the rule's cost, measured in benchmarks/results/pca-support.md.

Which side computes what: the server holds every device's statistic (FedMM's transported statistics, `FedMM.held`)
and computes `leave_out_basis` and `partner` (O(devices^2 d^3) a phase); the device computes which of its records it
keeps (`kept`) from the basis it is sent and the cap. It needs each device's statistic on the server: not FedPG or
FedPE (they upload a basis), not private mode (the coordinator sees sums).
"""

from __future__ import annotations

import numpy as np

from models.core.linalg import top_eigvecs
from models.detection.robust import residuals


def leave_out_basis(C: np.ndarray, weight: np.ndarray, out: list[int], rank: int) -> np.ndarray:
    """The top-`rank` eigenvectors of the weighted mean of the statistics C (axis 0 the device) without the devices
    `out` (server side)."""
    keep = np.ones(len(C), bool)
    keep[out] = False
    w = np.where(keep, weight, 0.0)
    if w.sum() <= 0:
        raise ValueError("a leave-out basis needs at least one device left in")
    return top_eigvecs(np.tensordot(w / w.sum(), C, axes=1), rank)[1]


def partner(C: np.ndarray, weight: np.ndarray, own: int, out: list[int], rank: int) -> int:
    """The device, not among `out`, whose statistic explains most of device `own`'s: the one that, left out with
    `out`, leaves the most of tr(C_own) outside the basis of the rest (server side; a colluder sharing what `own`
    alone holds explains it, an honest device does not)."""
    best, chosen = -np.inf, -1
    for j in range(len(C)):
        if j in out:
            continue
        Z = leave_out_basis(C, weight, [*out, j], rank)
        left = float(np.trace(C[own]) - np.trace(Z.T @ C[own] @ Z))
        if left > best:
            best, chosen = left, j
    return chosen


def kept(X: np.ndarray, C: np.ndarray, weight: np.ndarray, own: int | None, cap: float, rank: int,
         colluders: int) -> np.ndarray:
    """Which of a device's records X its statistic keeps (device side): those whose residual is at most `cap`
    against the basis of the devices' statistics C without its own (row `own`; None: the server holds none of it,
    and nothing is left out) and without its `colluders` - 1 `partner`s, chosen one at a time."""
    out = [] if own is None else [own]
    for _ in range(max(colluders - 1, 0) if own is not None else 0):
        if len(out) + 1 >= len(C):
            break
        out.append(partner(C, weight, own, out, rank))  # type: ignore[arg-type]
    return residuals(X, leave_out_basis(C, weight, out, rank)) <= cap
