"""A transport map on a promoted model (issue 26, point 5): a fleet whose traffic moved as a whole (a new site, a
sensor upgrade) keeps its vetted detector. The map is learnt in the detector's standardised space, from the
fleet's records (P, pooled over its devices) onto samples of the promoted model itself (Q: no traffic moves), and
applied to every record before scoring, with the detector's own threshold.

One map for the fleet, never one per device: a per-device map would carry a compromised device's shift away."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.mixture.gmm import Mixture
from models.otmap.icnn import Layout, transport


def mixture_samples(m: Mixture, n: int, rng: np.random.Generator) -> np.ndarray:
    """n records drawn from the mixture (its standardised space): component k with probability w_k, then
    mu_k + L_k'^-1 z, the precision being L_k L_k'."""
    which = rng.choice(m.n_components, size=n, p=m.weights / m.weights.sum())
    out = np.empty((n, m.n_features))
    for k in range(m.n_components):
        rows = np.flatnonzero(which == k)
        z = rng.standard_normal((m.n_features, len(rows)))
        out[rows] = m.means[k] + np.linalg.solve(m.prec_chol[k].T, z).T
    return out


class MappedDetector:
    """A detector (with `preprocessor_`, `score_samples` and `threshold_`) that scores records carried by the map
    grad f_omega in its standardised space."""

    def __init__(self, detector: Any, layout: Layout, omega: np.ndarray) -> None:
        if layout.d != detector.preprocessor_.n_features:
            raise ValueError(f"the map has {layout.d} features but the detector {detector.preprocessor_.n_features}")
        self.detector, self.layout, self.omega = detector, layout, omega
        self.threshold_ = detector.threshold_

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Records in original units, moved by the map (what the detector then scores)."""
        pre = self.detector.preprocessor_
        return pre.inverse_transform(transport(self.layout, self.omega, pre.transform(X)))

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.detector.score_samples(self.transform(X)))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.score_samples(X) > self.threshold_).astype(int)
