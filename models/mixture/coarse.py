"""A coarser mixture read from the trained one (issue 21, points 3 and 4; a simulator option, `--coarse F`).

The fleet's mixture merged into K / F components, with no extra round or upload: the components are grouped by a
weighted k-means on their means (weights the components'), and each group's merge matches its moments (the weights
summed, the mean and covariance of the group's mixture), which is the M-step of the group's statistics summed. A
record then scores by the smaller tail probability of the two mixtures, each measured against the fleet's held-out
normal scores (models.mixture.ridges), so a record the fine mixture finds ordinary because a light component of
rare normal traffic sits beside it is still judged by the coarse one.
"""

from __future__ import annotations

import numpy as np

from models.mixture.gmm import Mixture, kmeans, precision_cholesky, precisions


def merged(m: Mixture, factor: int, seed: int = 0) -> Mixture:
    """m's components merged into max(1, K // factor) groups, moment-matched."""
    if not 2 <= factor <= m.n_components:
        raise ValueError(f"coarse: the factor must be between 2 and the components ({m.n_components}), got {factor}")
    groups = max(1, m.n_components // factor)
    _, labels = kmeans(m.means, groups, np.random.default_rng(seed), weights=m.weights)
    covs = np.linalg.inv(precisions(m.prec_chol))
    second = covs + m.means[:, :, None] * m.means[:, None, :]  # E[x x'] of each component
    G = int(labels.max()) + 1
    weights = np.bincount(labels, weights=m.weights, minlength=G)
    means = np.stack([m.weights[labels == g] @ m.means[labels == g] for g in range(G)]) / weights[:, None]
    moments = np.stack([np.tensordot(m.weights[labels == g], second[labels == g], axes=1) for g in range(G)])
    merged_covs = moments / weights[:, None, None] - means[:, :, None] * means[:, None, :]
    merged_covs = (merged_covs + np.swapaxes(merged_covs, 1, 2)) / 2
    keep = weights > 0
    return Mixture(weights[keep] / weights[keep].sum(), means[keep], precision_cholesky(merged_covs[keep]))
