"""The dictionary detector: a record is normal when a few atoms of the fleet's dictionary rebuild it.

Shaped as the other families' detectors (models.detection.detector.ThresholdedDetector; PyOD's conventions):

- ``score_samples(X)``: 1/2 ||t - theta h||^2 + lambda ||h||_1 of the preprocessed record t, h its lasso codes
  (the loss of seed 003 eq. 28 at the record: what the dictionary cannot rebuild, plus what rebuilding costs);
  codes by float32 FISTA in place, a fixed number of iterations, a chunk of records at a time;
- ``explain(X)``: the atoms the record uses (their weight |h_k| ||theta_k||) and the features no atom reproduces
  (their share of the squared residual, with the observed value and the reconstruction in original units).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.detection.detector import ThresholdedDetector
from models.detection.preprocessing import Preprocessor
from models.dictionary.codes import SCORE_STEPS, lasso_codes

MODEL_VERSION = 1
_CHUNK = 4096


class DictionaryDetector(ThresholdedDetector):
    def __init__(self, lam: float = 0.1, quantile: float = 0.99, n_explain: int = 3, score_steps: int = SCORE_STEPS):
        self.lam = lam
        self.quantile = quantile
        self.n_explain = n_explain
        self.score_steps = score_steps

    @classmethod
    def from_model(cls, theta: np.ndarray, preprocessor: Preprocessor, threshold: float, **params: Any
                   ) -> DictionaryDetector:
        det = cls(**params)
        theta = np.asarray(theta, dtype=float)
        if theta.ndim != 2 or theta.shape[0] != preprocessor.n_features:
            raise ValueError(f"the dictionary has shape {theta.shape}: expected ({preprocessor.n_features}, atoms), "
                             "one row per feature")
        if not np.isfinite(theta).all():
            raise ValueError("the dictionary holds non-finite numbers")
        det.components_ = theta
        det._theta32 = theta.astype(np.float32)
        det.preprocessor_ = preprocessor
        det.feature_names_ = list(preprocessor.feature_names)
        det.threshold_ = float(threshold)
        return det

    components_: np.ndarray
    _theta32: np.ndarray
    preprocessor_: Preprocessor
    feature_names_: list[str]

    def codes(self, T: np.ndarray) -> np.ndarray:
        """Float32 lasso codes of preprocessed records (what scoring uses)."""
        return lasso_codes(T, self._theta32, self.lam, self.score_steps, None, np.float32)

    def losses(self, T: np.ndarray) -> np.ndarray:
        """The score of preprocessed records (float32 arithmetic, float64 result)."""
        T = np.asarray(T, dtype=np.float32)
        H = self.codes(T)
        R = T - H @ self._theta32.T
        return (0.5 * np.einsum("ij,ij->i", R, R) + self.lam * np.abs(H).sum(axis=1)).astype(float)

    def score_samples(self, X: np.ndarray) -> np.ndarray | float:
        X = np.asarray(X, dtype=float)
        if X.shape[-1] != len(self.feature_names_):
            raise ValueError(f"expected {len(self.feature_names_)} features, got {X.shape[-1]}")
        if X.ndim == 1:
            return float(self.losses(self.preprocessor_.transform(X[None]))[0])
        out = np.empty(X.shape[0])
        for i in range(0, X.shape[0], _CHUNK):
            out[i: i + _CHUNK] = self.losses(self.preprocessor_.transform(X[i: i + _CHUNK]))
        return out

    def explain(self, X: np.ndarray, top: int | None = None) -> list[list[dict[str, Any]]]:
        """Per record, the features with the largest share of the squared residual (what no atom reproduces),
        each with its observed value, the reconstruction in original units (``expected``) and the atoms the
        record uses, heaviest first (``atoms``: index and weight |h_k| ||theta_k||)."""
        top = top or self.n_explain
        X = np.atleast_2d(np.asarray(X, dtype=float))
        T = self.preprocessor_.transform(X)
        H = self.codes(T).astype(float)
        recon = H @ self.components_.T
        R2 = (T - recon) ** 2
        expected = self.within_seen(self.preprocessor_.inverse_transform(recon))
        total = R2.sum(axis=1, keepdims=True)
        share = np.divide(R2, total, out=np.zeros_like(R2), where=total > 0)
        order = np.argsort(-share, axis=1)[:, :top]
        weight = np.abs(H) * np.linalg.norm(self.components_, axis=0)
        out = []
        for i in range(X.shape[0]):
            used = [k for k in np.argsort(-weight[i]) if weight[i, k] > 0][:top]
            atoms = [{"atom": int(k), "weight": round(float(weight[i, k]), 4)} for k in used]
            out.append([{"feature": self.feature_names_[j], "share": round(float(share[i, j]), 4),
                         "value": float(X[i, j]), "expected": float(expected[i, j]), "atoms": atoms}
                        for j in order[i]])
        return out

    # -- persistence -------------------------------------------------------------------------------------------
    def to_wire(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        pre = self.preprocessor_
        return ({"theta": self.components_, **pre.wire_arrays()},
                {"detector": "dict", **pre.wire_meta(), "threshold": self.threshold_, "quantile": self.quantile,
                 "lam": self.lam})

    @classmethod
    def from_wire(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> DictionaryDetector:
        return cls.from_model(np.asarray(arrays["theta"], dtype=float), Preprocessor.from_wire(arrays, meta),
                              float(meta["threshold"]), lam=float(meta["lam"]),
                              quantile=float(meta.get("quantile", 0.99)))

    def to_dict(self) -> dict[str, Any]:
        return {"version": MODEL_VERSION, "detector": "dict", "theta": self.components_.tolist(),
                "threshold": self.threshold_, "quantile": self.quantile, "lam": self.lam,
                "preprocessing": self.preprocessor_.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DictionaryDetector:
        if d.get("version") != MODEL_VERSION:
            raise ValueError(f"unsupported model version {d.get('version')!r}")
        return cls.from_model(np.array(d["theta"], dtype=float), Preprocessor.from_dict(d["preprocessing"]),
                              d["threshold"], lam=float(d["lam"]), quantile=float(d["quantile"]))
