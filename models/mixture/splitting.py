"""Seeding a mixture by splitting (LBG, Linde, Buzo and Gray 1980) from summed statistics alone: one rule for private
mode's seeding over the fleet's records (models.mixture.summed) and plaintext FedEM's merge of the devices' clusters
(models.mixture.fedem).

A centre lives on only while `least` records chose it (min_cluster, and d + 1 for a covariance of full rank); the
splittable centres, most spread first (records x trace of their covariance), split in two along their principal
axis (+- half the standard deviation there) when both halves can keep `least` records. Splitting the most spread
centre first is what keeps a component from spanning two groups of records with nothing between them: a k-means
merge of the devices' cluster means sees no cluster's spread, and a component whose records lie on either side of
empty space gives the records that fall there (an attack flood beside normal traffic) a normal score.
"""

from __future__ import annotations

import numpy as np

from models.mixture.gmm import nearest, triu_unpack

#: splitting steps at most (a step may grow fewer centres than it split: a half too few records chose dies)
MAX_SPLITS = 16


def least_records(min_cluster: int, n_features: int) -> int:
    """The fewest records a seeding centre keeps: min_cluster, and enough for a covariance of full rank (d + 1)."""
    return max(int(min_cluster), int(n_features) + 1)


def split_centres(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, counts: np.ndarray, least: int,
                  room: int) -> np.ndarray:
    """The live centres (the means of their statistics R, S1, S2; models.mixture.gmm packing) and at most `room`
    more: the most spread of those whose `counts` records can give each half `least`, split along their principal
    axis."""
    d = S1.shape[1]
    centres = S1 / R[:, None]
    cov = triu_unpack(S2, d) / R[:, None, None] - centres[:, :, None] * centres[:, None, :]
    lam, V = np.linalg.eigh((cov + np.swapaxes(cov, -1, -2)) / 2)
    order = np.argsort(-(R * np.trace(cov, axis1=1, axis2=2)), kind="stable")
    order = order[counts[order] >= 2 * least - 0.5]  # each half keeps `least` records
    split = order[: max(room, 0)]
    step = 0.5 * np.sqrt(np.maximum(lam[split, -1], 0.0))[:, None] * V[split, :, -1]
    grown = np.vstack([centres, centres[split] + step])
    grown[split] -= step
    return grown


def splittable(counts: np.ndarray, least: int) -> bool:
    """Whether some centre's records could give both halves `least`."""
    return bool((np.asarray(counts) >= 2 * least - 0.5).any())


def split_labels(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, counts: np.ndarray, K: int, least: int) -> np.ndarray:
    """The group (of at most K, numbered from 0) each of many clusters merges into, by splitting on their summed
    statistics: the clusters (their weighted statistics R, S1, S2 and records `counts`) go to the nearest centre
    by their means, as records do in private mode's seeding rounds; split until K centres live, none can split or
    a step adds none."""
    means = S1 / R[:, None]
    centres = (S1.sum(axis=0) / R.sum())[None, :]
    before = 0
    for step in range(MAX_SPLITS + 1):
        labels, (gR, gS1, gS2), gC = _settle(means, centres, R, S1, S2, counts, least)
        if step == MAX_SPLITS or len(gR) >= K or len(gR) <= before or not splittable(gC, least):
            return labels
        before = len(gR)
        centres = split_centres(gR, gS1, gS2, gC, least, K - len(gR))
    raise AssertionError("unreachable")


def _settle(means: np.ndarray, centres: np.ndarray, R: np.ndarray, S1: np.ndarray, S2: np.ndarray,
            counts: np.ndarray, least: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """Each cluster to its nearest centre, dropping the centres fewer than `least` records chose (their clusters go
    to others) until none does (all of them when none lives): the labels, each group's sums and its records."""
    while True:
        labels = nearest(means, centres)
        sums = grouped_sums(R, S1, S2, labels, len(centres))
        records = np.bincount(labels, weights=counts, minlength=len(centres))
        live = records >= least - 0.5
        if live.all() or not live.any():
            used = np.flatnonzero(sums[0] > 0)
            index = np.zeros(len(centres), dtype=np.int64)
            index[used] = np.arange(len(used))
            return index[labels], (sums[0][used], sums[1][used], sums[2][used]), records[used]
        centres = centres[live]


def grouped_sums(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, labels: np.ndarray,
                 k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sums of many clusters' statistics per group of k (sums of statistics are exact)."""
    gR = np.bincount(labels, weights=R, minlength=k)
    gS1, gS2 = np.zeros((k, *S1.shape[1:])), np.zeros((k, *S2.shape[1:]))
    np.add.at(gS1, labels, S1)
    np.add.at(gS2, labels, S2)
    return gR, gS1, gS2
