"""Split training records across clients: iid, non-iid by sorting on one feature (as the paper),
or Dirichlet proportions over clusters; and the papers' balanced split into equal clusters (seed 003's
heterogeneous settings)."""

from __future__ import annotations

import numpy as np

PARTITIONS = ("iid", "noniid", "dirichlet")


def default_partition_feature(X: np.ndarray) -> int:
    """The feature with the most distinct values."""
    return int(np.argmax([len(np.unique(X[:, j])) for j in range(X.shape[1])]))


def partition(
    X: np.ndarray,
    n_clients: int,
    how: str = "noniid",
    rng: np.random.Generator | None = None,
    feature: int | None = None,
    alpha: float = 0.5,
    n_clusters: int = 10,
) -> list[np.ndarray]:
    """Indices of the records each client holds; every client gets at least one record."""
    rng = rng or np.random.default_rng(0)
    n = int(X.shape[0])
    if n_clients < 1:
        raise ValueError("clients must be at least 1")
    if n_clients > n:
        raise ValueError(f"{n_clients} clients but only {n} training records: every client needs one")
    if how == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(n), n_clients)]
    if how == "noniid":
        j = default_partition_feature(X) if feature is None else feature
        order = np.lexsort((rng.random(n), X[:, j]))  # ties broken at random
        return [np.sort(p) for p in np.array_split(order, n_clients)]
    if how == "dirichlet":
        return _dirichlet(X, n_clients, rng, alpha, n_clusters)
    raise ValueError(f"unknown partition {how!r}; choose from {', '.join(PARTITIONS)}")


def kmeans_labels(X: np.ndarray, k: int, rng: np.random.Generator, iters: int = 20) -> np.ndarray:
    """Plain Lloyd's k-means on standardised records (enough to define clusters for a split)."""
    Xs = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    k = min(k, len(np.unique(Xs, axis=0)))
    centres = Xs[rng.choice(len(Xs), k, replace=False)]
    labels = np.zeros(len(Xs), dtype=int)
    for _ in range(iters):
        d2 = (Xs**2).sum(1)[:, None] - 2 * Xs @ centres.T + (centres**2).sum(1)[None]
        labels = d2.argmin(1)
        for c in range(k):
            if (labels == c).any():
                centres[c] = Xs[labels == c].mean(0)
    return labels


def _dirichlet(X: np.ndarray, n_clients: int, rng: np.random.Generator, alpha: float,
               n_clusters: int) -> list[np.ndarray]:
    if alpha <= 0:
        raise ValueError("the Dirichlet concentration must be positive")
    labels = kmeans_labels(X, n_clusters, rng)
    parts: list[list[int]] = [[] for _ in range(n_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        p = rng.dirichlet(np.full(n_clients, alpha))
        cuts = (np.cumsum(p)[:-1] * len(idx)).astype(int)
        for i, chunk in enumerate(np.split(idx, cuts)):
            parts[i].extend(chunk.tolist())
    # every client needs data: move single records from the largest clients to empty ones
    for i in range(n_clients):
        if not parts[i]:
            donor = max(range(n_clients), key=lambda j: len(parts[j]))
            parts[i].append(parts[donor].pop())
    return [np.sort(np.array(p, dtype=int)) for p in parts]


def balanced_split(Z: np.ndarray, n: int, rng: np.random.Generator, iterations: int = 10) -> list[np.ndarray]:
    """Equal clusters (constrained k-means, Bradley et al. 2000, greedily): centres by k-means++ seeding, then
    each record in order of its best margin to the nearest centre with room; centres re-estimated."""
    size = -(-len(Z) // n)
    centres = Z[rng.choice(len(Z), n, replace=False)]
    assign = np.zeros(len(Z), dtype=int)
    for _ in range(iterations):
        D = ((Z[:, None, :] - centres[None]) ** 2).sum(axis=2)
        room = np.full(n, size)
        for i in np.argsort(D.min(axis=1) - D.max(axis=1)):
            for c in np.argsort(D[i]):
                if room[c]:
                    assign[i], room[c] = c, room[c] - 1
                    break
        centres = np.stack([Z[assign == c].mean(axis=0) for c in range(n)])
    return [Z[assign == c] for c in range(n)]
