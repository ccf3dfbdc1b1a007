"""Aggregation arithmetic as plain functions over stacked uploads (the first axis is the client).

`mean` is what the papers do; `median` (coordinate-wise) and `trimmed` (coordinate-wise trimmed mean)
tolerate a minority of clients that send garbage or adversarial matrices. `clip_norms` bounds each
upload's influence before any of them.
"""

from __future__ import annotations

import numpy as np

AGGREGATORS = ("mean", "median", "trimmed")


def weighted_mean(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=float)
    return np.tensordot(w / w.sum(), X, axes=1)


def coordinate_median(X: np.ndarray) -> np.ndarray:
    return np.median(X, axis=0)


def trimmed_mean(X: np.ndarray, trim: float = 0.2) -> np.ndarray:
    """Per coordinate, the mean after dropping the `trim` share of lowest and of highest values."""
    n = X.shape[0]
    k = int(np.floor(trim * n))
    if k == 0 or n - 2 * k < 1:
        return X.mean(axis=0)
    S = np.sort(X, axis=0)
    return S[k:n - k].mean(axis=0)


def trim_count(n: int, trim: float, at_least: int = 1) -> int:
    """Devices left out on each side: floor(trim n), at least `at_least` (the devices that may act together)
    once there are three, never the majority."""
    if trim <= 0 or n < 3:
        return 0
    return min(max(at_least, int(np.floor(trim * n))), (n - 1) // 2)


def trimmed_weighted_mean(X: np.ndarray, w: np.ndarray, trim: float, above: int = 0) -> np.ndarray:
    """Per coordinate (axis 0 is the device), the weighted mean of the values left after dropping the
    k lowest and k highest devices (k = `trim_count`): what `trimmed_mean` does, with weights and at least
    one device left out each side once there are three. `above` more devices are dropped at the top (never
    the majority): for a statistic only a rise of which does harm, so that `above` devices sending the largest
    values leave the honest devices' own symmetric trim."""
    X, w, n, k = _devices(X, w, trim)
    top = min(k + max(int(above), 0), (n - 1) // 2) if k else 0
    if top == 0:
        return np.tensordot(w / w.sum(), X, axes=1)
    order = np.argsort(X, axis=0, kind="stable")[k:n - top]
    kept = np.take_along_axis(X, order, axis=0)
    wk = w[order]
    return (kept * wk).sum(axis=0) / wk.sum(axis=0)


def _devices(X: np.ndarray, w: np.ndarray, trim: float, at_least: int = 1) -> tuple[np.ndarray, np.ndarray, int, int]:
    X = np.asarray(X, dtype=float)
    return X, np.asarray(w, dtype=float), X.shape[0], trim_count(X.shape[0], trim, at_least)


def winsorised_counts(n: int, trim: float, at_least: int = 1, above: int = 0) -> tuple[int, int]:
    """How many of `n` devices `winsorized_weighted_mean` leaves out at the top (`above`, when it winsorises at
    all; never the majority), and how many of the rest it winsorises at each side."""
    k = trim_count(n, trim, at_least)
    top = min(max(int(above), 0), (n - 1) // 2) if k else 0
    return top, (trim_count(n - top, trim, at_least) if top else k)


def winsorized_weighted_mean(X: np.ndarray, w: np.ndarray, trim: float, at_least: int = 1,
                             above: int = 0) -> np.ndarray:
    """Per coordinate (axis 0 is the device), the weighted mean after clipping every value into the range
    of the devices left once the k lowest and k highest are set aside (k = `trim_count`): one device moves
    it by at most its weight share times the others' spread, and, unlike trimming, a skewed but honest
    spread keeps its mean (the extremes are pulled in, not dropped).

    `above` devices with the highest values are first left out when it winsorises at all (never the majority; k
    is then counted among the rest): for a statistic only a rise of which does harm. Without them, `above` devices
    sending the largest values take the places winsorising pulls in, each counts as the highest honest device, and
    the honest devices above the others' range count whole; with them, they raise it at most to the honest
    devices' own winsorised mean."""
    X, w, n, _ = _devices(X, w, trim, at_least)
    top, k = winsorised_counts(n, trim, at_least, above)
    if top:
        order = np.argsort(X, axis=0, kind="stable")[: n - top]
        kept, wk = np.take_along_axis(X, order, axis=0), w[order]  # (devices left, coordinates) each
        if k:
            ordered = np.sort(kept, axis=0)
            kept = np.clip(kept, ordered[k], ordered[n - top - 1 - k])
        return (kept * wk).sum(axis=0) / wk.sum(axis=0)
    if k == 0:
        return np.tensordot(w / w.sum(), X, axes=1)
    ordered = np.sort(X, axis=0)
    return np.tensordot(w / w.sum(), np.clip(X, ordered[k], ordered[n - 1 - k]), axes=1)


def direction_capped_mean(C: np.ndarray, w: np.ndarray, colluders: int) -> np.ndarray:
    """The weighted mean of symmetric PSD matrices C_i (axis 0 is the device) after capping, along each
    eigen-direction v of the plain weighted mean, every device's weighted energy w_i v' C_i v at that of the
    (`colluders` + 1)-th heaviest device along v: `colluders` devices acting together cannot push the pooled second
    moment further along a direction they tilted than an honest device does (the mixture's mass cap, for
    directions). A device above the cap is shrunk along that direction, C_i -> T_i C_i T_i with T_i = V diag(sqrt
    f_i) V' (f_i <= 1, the cap over its energy), which keeps it PSD. Without `colluders`, or with too few devices to
    leave them a minority, the plain mean."""
    C, w = np.asarray(C, dtype=float), np.asarray(w, dtype=float)
    n = C.shape[0]
    k = min(int(colluders), (n - 1) // 2)
    M = np.tensordot(w / w.sum(), C, axes=1)
    if k <= 0:
        return M
    _, V = np.linalg.eigh((M + M.T) / 2)
    energy = w[:, None] * np.einsum("jk,bjl,lk->bk", V, C, V)  # (devices, directions) weighted energies
    cap = np.maximum(-np.sort(-energy, axis=0)[k], 0.0)  # (a transported statistic may be indefinite)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(energy > cap, cap / energy, 1.0)
    T = np.einsum("jk,bk,lk->bjl", V, np.sqrt(f), V)
    return np.tensordot(w / w.sum(), T @ C @ T, axes=1)


def clip_norms(X: np.ndarray, factor: float = 3.0, reference: float | None = None) -> np.ndarray:
    """Scale down uploads whose Frobenius norm exceeds `factor` times the median norm (or `reference`)."""
    norms = np.sqrt((X.reshape(len(X), -1) ** 2).sum(axis=1))
    bound = factor * (np.median(norms) if reference is None else reference)
    scale = np.where(norms > bound, bound / np.maximum(norms, 1e-300), 1.0)
    return X * scale.reshape((-1,) + (1,) * (X.ndim - 1))


def aggregate(X: np.ndarray, w: np.ndarray, how: str = "mean", trim: float = 0.2) -> np.ndarray:
    if how == "mean":
        return weighted_mean(X, w)
    if how == "median":
        return coordinate_median(X)
    if how == "trimmed":
        return trimmed_mean(X, trim)
    raise ValueError(f"unknown aggregator {how!r}; choose from {', '.join(AGGREGATORS)}")
