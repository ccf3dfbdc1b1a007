"""A transport map on a promoted model (issue 26, point 5): a fleet whose traffic moved as a whole (a new site, a
sensor upgrade) keeps its vetted detector. The map is learnt in the detector's standardised space, from the
fleet's records (P, pooled over its devices) onto samples of the promoted model itself (Q: no traffic moves), and
applied to every record before scoring, with the detector's own threshold.

One map for the fleet, never one per device: a per-device map would carry a compromised device's shift away."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.mixture.gmm import Mixture, precisions
from models.otmap.icnn import Layout, transport
from models.otmap.quantile import QuantileMap


def mixture_samples(m: Mixture, n: int, rng: np.random.Generator, ridge: float = 0.0) -> np.ndarray:
    """n records drawn from the mixture (its standardised space): component k with probability w_k, then
    mu_k + C_k z, C_k C_k' = Sigma_k - ridge I (eigenvalues clipped at 0), the precision being L_k L_k'.

    `ridge`: what the training added to every covariance (the detector's `reg`), taken off again: the ridge keeps a
    component that sits on discrete values scorable, it is not the traffic's spread. Drawn with it, the samples
    spread by sqrt(ridge) in every direction on which the training records do not vary at all, and the detector
    flags them at 2-4 times its nominal rate (measured, issue 26 point 5: ton-iot 7.7 %, synthetic 13.7 % at a
    threshold that flags 1.5 % of the training records; without it 1.3 % and 1.5 %)."""
    if not ridge >= 0:
        raise ValueError(f"the ridge taken off the mixture's covariances must be >= 0, got {ridge}")
    cov = np.linalg.inv(precisions(m.prec_chol)) - ridge * np.eye(m.n_features)
    w, V = np.linalg.eigh((cov + np.swapaxes(cov, 1, 2)) / 2)
    C = V * np.sqrt(np.maximum(w, 0.0))[:, None, :]
    which = rng.choice(m.n_components, size=n, p=m.weights / m.weights.sum())
    out = np.empty((n, m.n_features))
    for k in range(m.n_components):
        rows = np.flatnonzero(which == k)
        out[rows] = m.means[k] + rng.standard_normal((len(rows), m.n_features)) @ C[k].T
    return out


#: the prefix of the mapped detector's own arrays in a mapped model's envelope
BASE = "base."
#: the prefix of the per-feature start map's arrays (models.otmap.quantile) in a mapped model's envelope
START = "start."


class MappedDetector:
    """A detector (with `preprocessor_`, `score_samples` and `threshold_`) that scores records carried by the map
    grad f_omega in its standardised space, after the per-feature monotone map `start` when there is one. On the
    wire (the `otmap` family's model): the detector's own arrays under `BASE`, its meta under ``"base"``, the map's
    parameters ``omega`` and the start's arrays under `START`; everything else an agent asks of a detector (its
    features, preprocessing, quantile, tail) is the mapped detector's."""

    def __init__(self, detector: Any, layout: Layout, omega: np.ndarray, start: QuantileMap | None = None) -> None:
        if layout.d != detector.preprocessor_.n_features:
            raise ValueError(f"the map has {layout.d} features but the detector {detector.preprocessor_.n_features}")
        if omega.shape != (layout.size,) or not np.isfinite(omega).all():
            raise ValueError(f"the map's parameters must be {layout.size} finite numbers")
        if start is not None and start.lo.shape[0] != layout.d:
            raise ValueError(f"the start map has {start.lo.shape[0]} features but the detector {layout.d}")
        self.detector, self.layout, self.omega, self.start = detector, layout, omega, start
        self.threshold_ = detector.threshold_

    def __getattr__(self, name: str) -> Any:
        if name == "detector":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.detector, name)

    def to_wire(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        arrays, meta = self.detector.to_wire()
        start = {} if self.start is None else {START + k: v for k, v in self.start.to_arrays().items()}
        return ({**{BASE + k: v for k, v in arrays.items()}, "omega": self.omega, **start},
                {"detector": "otmap", "hidden": self.layout.hidden, "base": {**meta, "threshold": self.threshold_},
                 "threshold": float(self.threshold_)})

    @classmethod
    def from_wire(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> MappedDetector:
        from models.families import LEGACY_DETECTOR, family

        base = dict(meta["base"])
        kind = base.get("detector", LEGACY_DETECTOR)
        if kind == "otmap" or not family(kind).detector:
            raise ValueError(f"a transport map applies to a detector, not to {kind!r}")
        inner = family(kind).load_detector().from_wire(
            {k[len(BASE):]: v for k, v in arrays.items() if k.startswith(BASE)}, base)
        omega = np.asarray(arrays["omega"], dtype=float)
        start = {k[len(START):]: v for k, v in arrays.items() if k.startswith(START)}
        return cls(inner, Layout(inner.preprocessor_.n_features, int(meta["hidden"])), omega,
                   QuantileMap.from_arrays(start) if start else None)

    def explain(self, X: np.ndarray, top: int | None = None) -> list[list[dict[str, Any]]]:
        """The mapped detector's explanations of the records as the map moved them."""
        return list(self.detector.explain(self.transform(X), top))

    def see(self, records: Any) -> None:
        self.detector.see(self.transform(X) for X in records)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Records in original units, moved by the map (what the detector then scores)."""
        pre = self.detector.preprocessor_
        T = pre.transform(X)
        return pre.inverse_transform(transport(self.layout, self.omega, T if self.start is None else self.start(T)))

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.detector.score_samples(self.transform(X)))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.score_samples(X) > self.threshold_).astype(int)
