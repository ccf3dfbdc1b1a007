"""Gaussian mixture math in numpy: E-step sufficient statistics, M-step, log-densities.

The federated algorithms (models.mixture.fedem) exchange nothing but the sufficient statistics of the
E-step, per component k: the responsibility mass R_k = sum_n r_nk, the first moment S1_k = sum_n r_nk x_n
and the second moment S2_k = sum_n r_nk x_n x_n'. Sums of statistics from several devices are the
statistics of the pooled records, so the M-step on the aggregate is the pooled M-step.

Covariances carry a ridge (``reg``, in standardised units) so that a component that sits on discrete
values (a flag, a port class) stays non-singular; the same role as scikit-learn's ``reg_covar``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

LOG_2PI = float(np.log(2 * np.pi))


@dataclass
class Mixture:
    """A fitted mixture: weights (K,), means (K, d) and the Cholesky factors L_k of the precisions
    (Lambda_k = L_k L_k', upper triangular), which is what scoring needs."""

    weights: np.ndarray
    means: np.ndarray
    prec_chol: np.ndarray

    @property
    def n_components(self) -> int:
        return len(self.weights)

    @property
    def n_features(self) -> int:
        return self.means.shape[1]

    def log_norm(self) -> np.ndarray:
        """log pi_k - d/2 log 2 pi + log |L_k|: the log-density of component k at its own mean."""
        logdet = np.log(np.diagonal(self.prec_chol, axis1=1, axis2=2)).sum(axis=1)
        with np.errstate(divide="ignore"):
            return np.log(self.weights) - 0.5 * self.n_features * LOG_2PI + logdet

    def floor(self) -> float:
        """A lower bound on the negative log-likelihood of any record: -log max_k N_k(mu_k) (the weights
        sum to 1). Scores are NLL - floor, so they are never negative and a log-scale grid holds them."""
        logdet = np.log(np.diagonal(self.prec_chol, axis1=1, axis2=2)).sum(axis=1)
        return float(-np.max(-0.5 * self.n_features * LOG_2PI + logdet))


def precisions(prec_chol: np.ndarray) -> np.ndarray:
    """Lambda = L L' for each of a stack of precision Cholesky factors (..., d, d)."""
    return np.einsum("...ij,...lj->...il", prec_chol, prec_chol)


class LogDensity:
    """log pi_k + log N(x | mu_k, Sigma_k) of a mixture for every component, as quadratic forms:
    (x - mu)' P (x - mu) = [x x']_triu . p + x . (-2 P mu) + mu' P mu, for all components in two matrix products
    whose output is (n, K): 2.5x the throughput of forming (x - mu) L for every component, and no (n, K d)
    intermediate. Built once per mixture (the detector keeps one; an E-step builds one)."""

    def __init__(self, m: Mixture):
        d = m.n_features
        precision = precisions(m.prec_chol)  # (K, d, d): not kept (0.56 MiB at K = 64, d = 33)
        iu, ju = np.triu_indices(d)
        double = np.where(iu == ju, 1.0, 2.0)
        self.quad = np.ascontiguousarray((precision[:, iu, ju] * double).T)  # (d(d+1)/2, K)
        self.lin = np.ascontiguousarray(-2 * np.einsum("kij,kj->ik", precision, m.means))  # (d, K)
        self.const = np.einsum("ki,kij,kj->k", m.means, precision, m.means)
        self.log_norm = m.log_norm()

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """(n, K) for records X (n, d)."""
        A = outer_rows(X) @ self.quad
        A += X @ self.lin
        A += self.const
        A *= -0.5
        A += self.log_norm
        return A


#: bytes the largest temporary of a pass over a device's records may take: the outer products of a chunk of
#: records (chunk x d(d+1)/2 float64), so a pass costs a few MB whatever the buffer holds and however many
#: columns an encoding makes
CHUNK_BYTES = 2 * 2**20


def chunk_rows(d: int) -> int:
    """Records per chunk for d columns (512 at 22 features, 467 at 33, 41 at 100)."""
    return int(min(4096, max(32, CHUNK_BYTES // (8 * d * (d + 1) // 2))))


def chunks(X: np.ndarray, size: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """(start, records as float64) in consecutive chunks: buffers may hold float32, every sum is float64."""
    size = size or chunk_rows(X.shape[1])
    for i in range(0, len(X), size):
        yield i, np.asarray(X[i: i + size], dtype=float)


def nearest(X: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The index of each record's nearest centre (squared Euclidean distance), in chunks."""
    out = np.empty(len(X), dtype=np.int64)
    c2 = (centres**2).sum(axis=1)[None, :]
    for i, x in chunks(X):
        out[i: i + len(x)] = (c2 - 2 * x @ centres.T).argmin(axis=1)  # |x|^2 is the same for every centre
    return out


def onehot(labels: np.ndarray, K: int) -> np.ndarray:
    """(n, K): 1 at each record's label (a hard assignment as responsibilities)."""
    out = np.zeros((len(labels), K))
    out[np.arange(len(labels)), labels] = 1.0
    return out


def sq_distance(X: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared Euclidean distance of every record to one point, in chunks."""
    out = np.empty(len(X))
    for i, x in chunks(X):
        out[i: i + len(x)] = ((x - c) ** 2).sum(axis=1)
    return out


def logsumexp_rows(A: np.ndarray) -> np.ndarray:
    top = A.max(axis=1)
    top = np.where(np.isfinite(top), top, 0.0)
    return top + np.log(np.exp(A - top[:, None]).sum(axis=1))


def e_step(X: np.ndarray, m: Mixture) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Sufficient statistics (R (K,), S1 (K, d), S2 (K, d(d+1)/2): the upper triangles of sum r x x') of
    records X under m, and their total log-likelihood. Works in chunks (bounded memory on a device)."""
    K, d = m.means.shape
    R, S1, S2, ll = np.zeros(K), np.zeros((K, d)), np.zeros((K, d * (d + 1) // 2)), 0.0
    density = LogDensity(m)
    for _, x in chunks(X):
        A = density(x)
        lse = logsumexp_rows(A)
        resp = np.exp(A - lse[:, None])
        R += resp.sum(axis=0)
        S1 += resp.T @ x
        S2 += resp.T @ outer_rows(x)
        ll += float(lse.sum())
    return R, S1, S2, ll


def outer_rows(X: np.ndarray) -> np.ndarray:
    """(n, d(d+1)/2): the upper triangle of x x' for every record (row-major, the order of np.triu_indices),
    written into its result a row of the triangle at a time: the only (n, d(d+1)/2) array made is the result
    (X[:, i] * X[:, j] made three, 6 MiB at a 2 MiB chunk, which a device's resident memory showed)."""
    n, d = X.shape
    out = np.empty((n, d * (d + 1) // 2), dtype=X.dtype)
    start = 0
    for i in range(d):
        np.multiply(X[:, i: i + 1], X[:, i:], out=out[:, start: start + d - i])
        start += d - i
    return out


def triu_pack(S2: np.ndarray) -> np.ndarray:
    """(..., d, d) symmetric -> (..., d(d+1)/2) upper triangle (the order of `outer_rows`)."""
    i, j = np.triu_indices(S2.shape[-1])
    return S2[..., i, j]


@functools.lru_cache(maxsize=8)
def _unpacked_positions(d: int) -> np.ndarray:
    """For each entry (a, b) of a d x d matrix, flattened, its position in the packed upper triangle."""
    i, j = np.triu_indices(d)
    where = np.empty((d, d), dtype=np.intp)
    where[i, j] = where[j, i] = np.arange(len(i))
    return where.ravel()


def triu_unpack(P: np.ndarray, d: int) -> np.ndarray:
    """(..., d(d+1)/2) packed upper triangles -> (..., d, d) symmetric matrices (float64): one gather."""
    return np.asarray(P, dtype=float)[..., _unpacked_positions(d)].reshape(*P.shape[:-1], d, d)


def hard_stats(X: np.ndarray, labels: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The statistics (packed as `e_step`'s) of a hard clustering: responsibility 1 for the record's own
    cluster."""
    d = X.shape[1]
    R, S1, S2 = np.zeros(K), np.zeros((K, d)), np.zeros((K, d * (d + 1) // 2))
    for i, x in chunks(X):
        resp = onehot(labels[i: i + len(x)], K)
        R += resp.sum(axis=0)
        S1 += resp.T @ x
        S2 += resp.T @ outer_rows(x)
    return R, S1, S2


def soft_stats(X: np.ndarray, centres: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The statistics (packed as `e_step`'s) of deterministic annealing's assignment (Rose 1998): each record shared
    among the centres in proportion to exp(-|x - c|^2 / (2 temperature)); at temperature 0, `hard_stats` of the
    nearest centre."""
    K, d = centres.shape
    R, S1, S2 = np.zeros(K), np.zeros((K, d)), np.zeros((K, d * (d + 1) // 2))
    c2 = (centres**2).sum(axis=1)[None, :]
    for _, x in chunks(X):
        A = -(c2 - 2 * x @ centres.T) / (2 * temperature)  # |x|^2 is the same for every centre
        resp = np.exp(A - A.max(axis=1, keepdims=True))
        resp /= resp.sum(axis=1, keepdims=True)
        R += resp.sum(axis=0)
        S1 += resp.T @ x
        S2 += resp.T @ outer_rows(x)
    return R, S1, S2


def m_step(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, reg: float, min_mass: float = 1e-6) -> Mixture:
    """The maximum-likelihood mixture for these statistics (S2 packed), with `reg` added to every
    covariance's diagonal. A component with (almost) no mass gets the pooled mean and covariance, and a
    tiny weight."""
    R = np.asarray(R, dtype=float)
    d = S1.shape[1]
    S2 = triu_unpack(np.asarray(S2, dtype=float), d)
    total = max(R.sum(), 1e-300)
    pooled_mean = S1.sum(axis=0) / total
    pooled_cov = S2.sum(axis=0) / total - np.outer(pooled_mean, pooled_mean)
    empty = min_mass * total > R
    Rs = np.where(empty, 1.0, R)
    means = np.where(empty[:, None], pooled_mean, S1 / Rs[:, None])
    covs = S2 / Rs[:, None, None] - means[:, :, None] * means[:, None, :]
    covs = np.where(empty[:, None, None], pooled_cov, covs)
    covs = nearest_psd(covs) + reg * np.eye(d)
    weights = np.where(empty, min_mass, R / total)
    weights = weights / weights.sum()
    return Mixture(weights, means, precision_cholesky(covs))


def nearest_psd(covs: np.ndarray) -> np.ndarray:
    """The nearest positive semi-definite matrices (symmetrised, negative eigenvalues set to 0). S2/R - mu mu' of
    a component that sits on repeated records, on a feature constant on its devices or on a handful of values is
    singular, and float32 uploads or the subtraction's cancellation leave it slightly indefinite, by more than a
    small ridge: clipping makes the ridge the floor of every eigenvalue, whatever the traffic. A matrix a Cholesky
    factor shows positive definite is its own nearest (most are: one batched factorisation at a tenth of eigh's
    cost); only the others are decomposed."""
    sym = (covs + np.swapaxes(covs, -1, -2)) / 2
    try:
        np.linalg.cholesky(sym)
        return sym
    except np.linalg.LinAlgError:
        pass
    flat = sym.reshape(-1, *sym.shape[-2:])
    bad = np.array([not _definite(c) for c in flat], dtype=bool)
    w, V = np.linalg.eigh(flat[bad])
    out = flat.copy()
    out[bad] = (V * np.maximum(w, 0.0)[..., None, :]) @ np.swapaxes(V, -1, -2)
    return out.reshape(sym.shape)


def _definite(c: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(c)
        return True
    except np.linalg.LinAlgError:
        return False


def precision_cholesky(covs: np.ndarray) -> np.ndarray:
    """L_k with L_k L_k' = Sigma_k^-1 (upper triangular), as scikit-learn computes it: the transposed
    inverse of the Cholesky factor of Sigma_k. A covariance that is not positive definite raises."""
    K, d, _ = covs.shape
    try:
        c = np.linalg.cholesky(covs)  # all components at once
    except np.linalg.LinAlgError:
        for k in range(K):  # name the first that is not
            try:
                np.linalg.cholesky(covs[k])
            except np.linalg.LinAlgError:
                raise np.linalg.LinAlgError(f"component {k}: covariance is not positive definite; raise reg") from None
        raise
    # Sigma = c c', so Sigma^-1 = c^-T c^-1 = L L' with L = c^-T
    return np.triu(np.swapaxes(np.linalg.solve(c, np.broadcast_to(np.eye(d), covs.shape)), -1, -2))


def kmeans(X: np.ndarray, k: int, rng: np.random.Generator, weights: np.ndarray | None = None,
           iters: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """Weighted k-means++ then Lloyd's iterations: (centres (k, d), labels (n,)). k <= len(X)."""
    n = len(X)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    k = min(k, n)
    centres = np.empty((k, X.shape[1]))
    centres[0] = X[rng.choice(n, p=w / w.sum())]
    d2 = sq_distance(X, centres[0])
    for c in range(1, k):
        p = w * d2
        s = p.sum()
        j = rng.choice(n, p=p / s) if s > 0 else rng.integers(n)
        centres[c] = X[j]
        np.minimum(d2, sq_distance(X, centres[c]), out=d2)
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(iters):
        new = nearest(X, centres)
        if _ > 0 and np.array_equal(new, labels):
            break
        labels = new
        mass = np.bincount(labels, weights=w, minlength=k)
        sums = np.zeros_like(centres)
        for i, x in chunks(X):
            sums += onehot(labels[i: i + len(x)], k).T @ (x * w[i: i + len(x), None])
        filled = mass > 0
        centres[filled] = sums[filled] / mass[filled, None]
    return centres, labels
