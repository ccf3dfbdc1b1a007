"""A ridge per component, chosen by the fleet's held-out likelihood (issue 21, points 3 and 4).

The best single ridge differs by orders of magnitude between kinds of traffic (ton-iot about 1e-4, nsl-kdd
0.1-0.3), and one fleet's traffic mixes kinds: a component on repeated discrete flows wants a tight covariance, a
component on spread-out traffic a broad one. The k-means rounds' statistics (every record to its nearest mean) do
not depend on the ridge, so the server takes the M-step of the same aggregate at each candidate ridge (the same
weights and means, no extra round of training) and each component keeps the ridge under which the fleet's held-out
normal records that fall in it (nearest mean, the training's own rule) are likeliest: cross-validated
regularisation, one choice per component. Each device sends, for its held-out records, the count per component
and the sum of their log-densities under their component at every candidate (K x (R + 1) numbers, one more
phase before the threshold's); a component with fewer than `least` held-out records in the fleet takes the ridge
the whole fleet's held-out records prefer. One mixture results: it scores, and its threshold is read, as any.
"""

from __future__ import annotations

import numpy as np

from models.mixture.gmm import LOG_2PI, Mixture, chunks, nearest


def own_distance(T: np.ndarray, labels: np.ndarray, m: Mixture) -> np.ndarray:
    """The squared Mahalanobis distance of each standardised record x to its own component k = labels."""
    out = np.empty(len(T))
    for k in np.unique(labels):
        rows = np.flatnonzero(labels == k)
        for i, x in chunks(T[rows]):
            out[rows[i: i + len(x)]] = (((x - m.means[k]) @ m.prec_chol[k]) ** 2).sum(axis=1)
    return out


def log_root_det(m: Mixture) -> np.ndarray:
    """log |L_k| = -1/2 log det Sigma_k of every component."""
    return np.log(np.diagonal(m.prec_chol, axis1=1, axis2=2)).sum(axis=1)


def own_log_density(T: np.ndarray, labels: np.ndarray, m: Mixture) -> np.ndarray:
    """log N(x | mu_k, Sigma_k) of each standardised record x under its own component k = labels (no weight)."""
    return log_root_det(m)[labels] - 0.5 * (m.n_features * LOG_2PI + own_distance(T, labels, m))


def volume_choice(labels: np.ndarray, distances: np.ndarray, candidates: list[Mixture], q: float,
                  least: int) -> np.ndarray:
    """Each component's candidate by the least volume that holds a share q of its held-out records (the
    mass-volume criterion of unsupervised anomaly detection, Clemencon and Jakubowicz 2013): the ellipsoid
    (x - mu)' Sigma_r^-1 (x - mu) <= rho_r^2, rho_r^2 the q-quantile of the records' distances under ridge r,
    has log volume 1/2 log det Sigma_r + d/2 log rho_r^2 (+ a constant). `labels` (n,) and `distances` (R, n): the
    fleet's held-out records. A component with fewer than `least` records takes the choice that minimises the
    record-weighted sum of the others' log volumes."""
    K, d = candidates[0].n_components, candidates[0].n_features
    counts = np.bincount(labels, minlength=K)
    logvol = np.zeros((len(candidates), K))
    for k in np.flatnonzero(counts >= least):
        rho2 = np.quantile(distances[:, labels == k], q, axis=1)
        logvol[:, k] = -np.array([log_root_det(m)[k] for m in candidates]) + 0.5 * d * np.log(np.maximum(rho2, 1e-300))
    fleet = int(np.argmin((logvol * counts).sum(axis=1)))
    return np.where(counts >= least, np.argmin(logvol, axis=0), fleet)


def heldout_sums(T: np.ndarray, candidates: list[Mixture]) -> tuple[np.ndarray, np.ndarray]:
    """What one device sends: its held-out records per component (K,) and the sum of their log-densities under
    their component at each candidate ridge (R, K). Records belong to the component of the nearest mean."""
    K = candidates[0].n_components
    labels = nearest(T, candidates[0].means)
    counts = np.bincount(labels, minlength=K).astype(float)
    sums = np.stack([np.bincount(labels, weights=own_log_density(T, labels, m), minlength=K) for m in candidates])
    return counts, sums


def choose(counts: np.ndarray, sums: np.ndarray, least: int) -> np.ndarray:
    """Each component's candidate (index into the ridges) from the fleet's summed counts (K,) and log-densities
    (R, K): its own likeliest, or the fleet's likeliest where fewer than `least` held-out records fell in it."""
    fleet = int(np.argmax(sums.sum(axis=1)))
    return np.where(np.asarray(counts) >= least, np.argmax(sums, axis=0), fleet)


def assemble(m: Mixture, candidates: list[Mixture], choice: np.ndarray) -> Mixture:
    """The mixture m (its weights and means) with each component's covariance from its chosen candidate."""
    prec = np.stack([candidates[int(c)].prec_chol[k] for k, c in enumerate(choice)])
    return Mixture(m.weights, m.means, prec)


def fleet_choice(held: list[np.ndarray], candidates: list[Mixture], criterion: str, q: float,
                 least: int) -> np.ndarray:
    """Each component's candidate from the devices' standardised held-out records (one array per device):
    "likelihood", from what each device sends (`heldout_sums`) summed; "volume" (`volume_choice`), from the pooled
    distances, which devices would send as histograms per component and candidate (measured in the simulator only;
    the likelihood phase's upload is counted for both)."""
    if criterion == "volume":
        T = np.vstack(held)
        labels = nearest(T, candidates[0].means)
        distances = np.stack([own_distance(T, labels, m) for m in candidates])
        return volume_choice(labels, distances, candidates, q, least)
    sums = [heldout_sums(T, candidates) for T in held]
    return choose(np.sum([c for c, _ in sums], axis=0), np.sum([s for _, s in sums], axis=0), least)
