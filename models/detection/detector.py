"""What every anomaly detector derives from its score and its threshold (PyOD's conventions: higher scores are
more anomalous; ``decision_function`` is the score minus ``threshold_``; ``predict`` is 1 for an anomaly). The
families' detectors: `models.pca.detector.PCADetector`, `models.mixture.detector.MixtureDetector`."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class ThresholdedDetector:
    """What every detector derives from its score and its threshold (PyOD's conventions), and the range of each
    feature's values the device trained on (`seen`), within which an explanation's expected values are shown."""

    threshold_: float
    #: per feature, the least and the largest value of the records the device trained on (None: not known, as in
    #: the simulators' and the pooled detectors)
    seen_: tuple[np.ndarray, np.ndarray] | None = None

    def see(self, records: Iterable[np.ndarray]) -> None:
        """Remember each feature's range over these records (a device's training records, a block at a time)."""
        lo = hi = None
        for X in records:
            X = np.asarray(X, dtype=float)
            if not len(X):
                continue
            lo = X.min(axis=0) if lo is None else np.minimum(lo, X.min(axis=0))
            hi = X.max(axis=0) if hi is None else np.maximum(hi, X.max(axis=0))
        self.seen_ = None if lo is None or hi is None else (lo, hi)

    def within_seen(self, expected: np.ndarray) -> np.ndarray:
        """Expected values (records x features, original units) kept within what the device has seen normal: a
        model's conditional mean or reconstruction can fall below 0 for a count, or beyond any normal value; an
        analyst is shown the nearest value the device's normal traffic had."""
        if self.seen_ is None:
            return expected
        return np.clip(expected, self.seen_[0], self.seen_[1])

    def score_samples(self, X: np.ndarray) -> np.ndarray | float:
        raise NotImplementedError

    def decision_function(self, X: np.ndarray) -> np.ndarray | float:
        return self.score_samples(X) - self.threshold_

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.decision_function(X) > 0).astype(int)


def check_matrix(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of records x features, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("input contains NaN or infinite values")
    return X
