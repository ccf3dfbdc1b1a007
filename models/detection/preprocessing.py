"""Preprocessing that is part of the model: signed log1p, then standardisation with global statistics.

The global statistics are computed federatedly: every client contributes its count, its sum and its
sum of squares of the transformed features (:class:`Moments`), and nothing else. Each client also
keeps the full outer-product sum, from which it derives its second-moment matrix C_i around the
*global* mean once the global statistics are known (so that sum_i n_i C_i is the pooled covariance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PREPROCESSING_VERSION = 1

#: how a device holds records (its training buffer) and standardised training records: 4 bytes a value. The
#: simulator rounds its records the same way, so that it computes what the devices compute.
RECORD_DTYPE = np.float32


def as_device_records(X: np.ndarray) -> np.ndarray:
    """Records as a device's buffer holds them (rounded to RECORD_DTYPE), in float64 for the arithmetic."""
    return np.asarray(X, dtype=RECORD_DTYPE).astype(float)


def signed_log1p(X: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """sign(x) * log(1 + |x|), applied to the columns selected by mask (all when None)."""
    X = np.asarray(X, dtype=float)
    if mask is None:
        return np.copysign(np.log1p(np.abs(X)), X)
    out = X.copy()
    out[..., mask] = np.copysign(np.log1p(np.abs(X[..., mask])), X[..., mask])
    return out


@dataclass
class Moments:
    """Streaming sufficient statistics of a client's (transformed) records: count, sum, outer sum."""

    count: int
    total: np.ndarray  # (d,)
    outer: np.ndarray  # (d, d): sum of x x^T

    @classmethod
    def empty(cls, d: int) -> Moments:
        return cls(0, np.zeros(d), np.zeros((d, d)))

    @classmethod
    def of(cls, X: np.ndarray) -> Moments:
        m = cls.empty(X.shape[1])
        m.update(X)
        return m

    def update(self, X: np.ndarray) -> None:
        X = np.atleast_2d(np.asarray(X, dtype=float))
        self.count += X.shape[0]
        self.total += X.sum(axis=0)
        self.outer += X.T @ X

    def merge(self, other: Moments) -> Moments:
        return Moments(self.count + other.count, self.total + other.total, self.outer + other.outer)

    def summary(self) -> tuple[int, np.ndarray, np.ndarray]:
        """What a client sends for the global statistics: count, sum and sum of squares."""
        return self.count, self.total.copy(), np.diag(self.outer).copy()

    def second_moment(self, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """C_i = (1/n_i) sum (x - mean)(x - mean)^T / (scale scale^T): standardised with global stats."""
        if self.count == 0:
            return np.zeros_like(self.outer)
        n = self.count
        mu_s = np.outer(self.total, mean)
        raw = (self.outer - mu_s - mu_s.T) / n + np.outer(mean, mean)
        return raw / np.outer(scale, scale)


def global_standardisation(
    summaries: list[tuple[int, np.ndarray, np.ndarray]], min_scale: float = 1e-12
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled mean and standard deviation from clients' (count, sum, sum of squares).

    Returns (mean, scale, zero_variance_mask); zero-variance features get scale 1.
    """
    n = sum(s[0] for s in summaries)
    if n == 0:
        raise ValueError("no training records: cannot compute global statistics")
    total = np.sum([s[1] for s in summaries], axis=0)
    sumsq = np.sum([s[2] for s in summaries], axis=0)
    mean = total / n
    var = np.maximum(sumsq / n - mean**2, 0.0)
    zero = constant(mean, np.sqrt(var), min_scale)
    return mean, np.where(zero, 1.0, np.sqrt(var)), zero


def constant(mean: np.ndarray, scale: np.ndarray, min_scale: float = 1e-12) -> np.ndarray:
    """The features the federation's records do not vary on (their scale a negligible share of their mean):
    standardised with scale 1."""
    return np.asarray(scale) <= min_scale * np.maximum(1.0, np.abs(mean))


@dataclass
class Preprocessor:
    """Maps raw records onto the model's standardised feature space (and back, for explanations)."""

    feature_names: list[str]
    log_mask: np.ndarray  # bool (d,)
    mean: np.ndarray
    scale: np.ndarray
    version: int = PREPROCESSING_VERSION
    #: how records with text fields and unset values become these features (models.detection.encoding.FeatureEncoder's
    #: to_dict), when the job agreed one; None: the features are named numeric columns
    encoding: dict[str, Any] | None = None
    _inv_scale: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.log_mask = np.asarray(self.log_mask, dtype=bool)
        self.mean = np.asarray(self.mean, dtype=float)
        self.scale = np.asarray(self.scale, dtype=float)
        self._inv_scale = 1.0 / self.scale
        self._all_log = bool(self.log_mask.all())

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    def transform(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        if self._all_log:
            T = np.abs(X)
            np.log1p(T, out=T)
            np.copysign(T, X, out=T)
        else:
            T = signed_log1p(X, self.log_mask)
        T -= self.mean
        T *= self._inv_scale
        np.nan_to_num(T, copy=False, nan=0.0)  # unset values (NaN) are taken at the global mean: 0 standardised
        return T

    def inverse_transform(self, T: np.ndarray) -> np.ndarray:
        X = np.asarray(T, dtype=float) * self.scale + self.mean
        m = self.log_mask
        X[..., m] = np.copysign(np.expm1(np.abs(X[..., m])), X[..., m])
        return X

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "feature_names": list(self.feature_names),
            "log_mask": self.log_mask.astype(int).tolist(),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            **({"encoding": self.encoding} if self.encoding is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Preprocessor:
        if d.get("version") != PREPROCESSING_VERSION:
            raise ValueError(f"unsupported preprocessing version {d.get('version')!r}")
        return cls(list(d["feature_names"]), np.array(d["log_mask"], bool), np.array(d["mean"]),
                   np.array(d["scale"]), encoding=d.get("encoding"))

    # -- on the wire (a model envelope: arrays and JSON meta) -------------------------------------------
    def wire_arrays(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "scale": self.scale, "log_mask": self.log_mask.astype(np.uint8)}

    def wire_meta(self) -> dict[str, Any]:
        return {"features": list(self.feature_names), **({"encoding": self.encoding} if self.encoding else {})}

    @classmethod
    def from_wire(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Preprocessor:
        return cls(list(meta["features"]), np.asarray(arrays["log_mask"]).astype(bool), arrays["mean"],
                   arrays["scale"], encoding=meta.get("encoding"))
