"""The anomaly detector: reconstruction error against the consensus subspace Z.

Shaped like a scikit-learn / PyOD detector: hyper-parameters in __init__, learned state with a
trailing underscore, ``fit`` returns self. Scores follow PyOD's convention: higher means more anomalous.

- ``score_samples(X)``: squared reconstruction error ||(I - Z Z') t(x)||^2 of the preprocessed record
  (an (n,) array for (n, d) records, a float for one (d,) record; so is ``decision_function``);
- ``decision_function(X)``: score minus ``threshold_`` (positive means anomalous);
- ``predict(X)``: 1 for an anomaly, 0 for normal;
- ``explain(X)``: the features that carry most of the residual, with observed and expected values.

With a lift (``lift_``, models.kernel.RandomFourierFeatures) the record is mapped to random Fourier
features after the preprocessing, and Z lives in the lifted space (kernel PCA): the score is the residual
||(I - Z Z') z(t(x))||^2 of the lifted record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.core.linalg import orth, top_eigvecs
from models.detection.detector import ThresholdedDetector, check_matrix
from models.detection.preprocessing import Moments, Preprocessor, global_standardisation, signed_log1p
from models.detection.threshold import federated_quantile
from models.kernel import RandomFourierFeatures

MODEL_VERSION = 1
_CHUNK = 8192


class PCADetector(ThresholdedDetector):
    def __init__(self, rank: int = 3, quantile: float = 0.99, log_transform: bool = True, n_explain: int = 3):
        self.rank = rank
        self.quantile = quantile
        self.log_transform = log_transform
        self.n_explain = n_explain

    # -- fitting -----------------------------------------------------------------------------------
    def fit(self, X: np.ndarray, feature_names: list[str] | None = None) -> PCADetector:
        """Centralised fit on pooled records (the quality limit of the federated algorithms)."""
        X = check_matrix(X)
        names = feature_names or [f"f{j}" for j in range(X.shape[1])]
        mask = np.full(X.shape[1], self.log_transform)
        m = Moments.of(signed_log1p(X, mask))
        mean, scale, _ = global_standardisation([m.summary()])
        pre = Preprocessor(names, mask, mean, scale)
        C = m.second_moment(mean, scale)
        if not 1 <= self.rank < X.shape[1]:
            raise ValueError(f"rank must be between 1 and {X.shape[1] - 1} (the number of features - 1)")
        Z = top_eigvecs(C, self.rank)[1]
        self._set(Z, pre, 0.0)
        self.threshold_ = federated_quantile([np.asarray(self.score_samples(X))], self.quantile)
        return self

    @classmethod
    def from_model(cls, Z: np.ndarray, preprocessor: Preprocessor, threshold: float,
                   lift: RandomFourierFeatures | None = None, **params: Any) -> PCADetector:
        det = cls(rank=Z.shape[1], **params)
        det._set(Z, preprocessor, threshold, lift)
        return det

    def _set(self, Z: np.ndarray, pre: Preprocessor, threshold: float,
             lift: RandomFourierFeatures | None = None) -> None:
        if lift is not None and lift.n_features != pre.n_features:
            raise ValueError(f"the lift maps {lift.n_features} features but the preprocessing has {pre.n_features}")
        rows = pre.n_features if lift is None else lift.n_components
        if Z.shape[0] != rows:
            raise ValueError(f"Z has {Z.shape[0]} rows but the {'lifted ' if lift else ''}features are {rows}")
        self.components_ = np.ascontiguousarray(orth(np.asarray(Z, dtype=float)))
        self.preprocessor_ = pre
        self.lift_ = lift
        self._components32 = self.components_.astype(np.float32)
        self.threshold_ = float(threshold)
        self.feature_names_ = list(pre.feature_names)

    # -- scoring -----------------------------------------------------------------------------------
    def _project(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the record as the model sees it, its coordinates in Z); lifted records in float32."""
        T = self.preprocessor_.transform(X)
        if self.lift_ is None:
            return T, T @ self.components_
        F = self.lift_.transform32(T)
        return F, F @ self._components32

    def score_samples(self, X: np.ndarray) -> np.ndarray | float:
        # C order whatever the caller's layout, so the sums add in one order: an agent's column selection is in
        # Fortran order, and a record it alerted on then scored 1 ulp above the threshold that marking it as a
        # false positive had set to its score. (A batch's size can still change the last bits: BLAS's kernels.)
        X = np.ascontiguousarray(X, dtype=float)
        if X.shape[-1] != len(self.feature_names_):
            raise ValueError(f"expected {len(self.feature_names_)} features, got {X.shape[-1]}")
        if X.ndim == 1:
            T, P = self._project(X)
            return max(float(T @ T) - float(P @ P), 0.0)
        out = np.empty(X.shape[0])
        for i in range(0, X.shape[0], _CHUNK):  # chunks that stay in cache: ~2x the throughput
            T, P = self._project(X[i : i + _CHUNK])
            s = out[i : i + _CHUNK]
            np.einsum("ij,ij->i", T, T, out=s)
            s -= np.einsum("ij,ij->i", P, P)
            np.maximum(s, 0.0, out=s)
        return out

    def explain(self, X: np.ndarray, top: int | None = None) -> list[list[dict[str, Any]]]:
        """Per record, the features with the largest share of the squared residual (``expected``: the
        record's reconstruction in original units).

        Lifted models have no per-feature residual; there a feature's share is its first-order
        contribution |d score / d t_j| |t_j| (gradient through the cosine map, in closed form, times its
        distance from the federation's mean in standardised units), and ``expected`` is the feature's
        mean in original units (the preprocessing's centre mapped back)."""
        top = top or self.n_explain
        X = np.atleast_2d(np.asarray(X, dtype=float))
        if self.lift_ is None:
            T, P = self._project(X)
            recon = P @ self.components_.T
            R2 = (T - recon) ** 2
            expected = self.preprocessor_.inverse_transform(recon)
        else:
            R2, expected = self._lifted_attribution(X)
        expected = self.within_seen(expected)
        total = R2.sum(axis=1, keepdims=True)
        share = np.divide(R2, total, out=np.zeros_like(R2), where=total > 0)
        order = np.argsort(-share, axis=1)[:, :top]
        return [
            [
                {
                    "feature": self.feature_names_[j],
                    "share": round(float(share[i, j]), 4),
                    "value": float(X[i, j]),
                    "expected": float(expected[i, j]),
                }
                for j in order[i]
            ]
            for i in range(X.shape[0])
        ]

    def _lifted_attribution(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """|g_j t_j| with g = d score / dt = W (-sqrt(2/D) sin(u) * 2 r), r = (I - ZZ') z(t); and the means."""
        lift = self.lift_
        assert lift is not None
        T = self.preprocessor_.transform(X)
        U = lift.phase(T)
        F = lift.scale_ * np.cos(U)
        R = F - (F @ self.components_) @ self.components_.T
        G = (-2.0 * lift.scale_ * np.sin(U) * R) @ lift.weights_.T
        expected = np.broadcast_to(self.preprocessor_.inverse_transform(np.zeros(T.shape[1])), T.shape)
        return np.abs(G * T), expected

    # -- persistence -------------------------------------------------------------------------------
    def to_wire(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arrays and metadata of the model envelope (wire.model)."""
        pre = self.preprocessor_
        lifted = {} if self.lift_ is None else {"rff": self.lift_.params()}
        return ({"Z": self.components_, **pre.wire_arrays()},
                {"detector": "pca", **pre.wire_meta(), "threshold": self.threshold_, "quantile": self.quantile,
                 **lifted})

    @classmethod
    def from_wire(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> PCADetector:
        pre = Preprocessor.from_wire(arrays, meta)
        lift = RandomFourierFeatures.from_params(meta["rff"]) if meta.get("rff") else None
        return cls.from_model(np.asarray(arrays["Z"], dtype=float), pre, float(meta["threshold"]), lift,
                              quantile=float(meta.get("quantile", 0.99)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MODEL_VERSION,
            "rank": int(self.components_.shape[1]),
            "Z": self.components_.tolist(),
            "threshold": self.threshold_,
            "quantile": self.quantile,
            "preprocessing": self.preprocessor_.to_dict(),
            **({} if self.lift_ is None else {"rff": self.lift_.params()}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PCADetector:
        if d.get("version") != MODEL_VERSION:
            raise ValueError(f"unsupported model version {d.get('version')!r}")
        pre = Preprocessor.from_dict(d["preprocessing"])
        lift = RandomFourierFeatures.from_params(d["rff"]) if d.get("rff") else None
        return cls.from_model(np.array(d["Z"], dtype=float), pre, d["threshold"], lift, quantile=d["quantile"])
