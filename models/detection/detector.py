"""What every anomaly detector derives from its score and its threshold (PyOD's conventions: higher scores are
more anomalous; ``decision_function`` is the score minus ``threshold_``; ``predict`` is 1 for an anomaly). The
families' detectors: `models.pca.detector.PCADetector`, `models.mixture.detector.MixtureDetector`."""

from __future__ import annotations

import numpy as np


class ThresholdedDetector:
    """What every detector derives from its score and its threshold (PyOD's conventions)."""

    threshold_: float

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
