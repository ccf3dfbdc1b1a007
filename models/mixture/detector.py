"""The mixture detector: negative log-likelihood under a Gaussian mixture of standardised records.

Shaped like `models.pca.detector.PCADetector` (and scikit-learn / PyOD): ``score_samples`` (higher is more
anomalous), ``decision_function``, ``predict``, ``explain``, ``threshold_``, ``to_dict``/``from_dict``.

The score is NLL(x) - floor, where floor = -log max_k N_k(mu_k) bounds the NLL of any record from below, so
scores are never negative and the devices' histograms share the log-scale grid of `models.detection.threshold`.

Explanation of a flagged record, under the component that is most responsible for it (k*): for every
feature j, how much of the record's Mahalanobis distance goes away if x_j is replaced by its conditional
mean given the other features, E[x_j | x_-j] = x_j - (Lambda (x - mu))_j / Lambda_jj; that reduction is
(Lambda (x - mu))_j^2 / Lambda_jj. The features with the largest share are reported, with the observed value
and the conditional mean, both in original units.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from models.detection.detector import ThresholdedDetector
from models.detection.preprocessing import Moments, Preprocessor, global_standardisation, signed_log1p
from models.detection.threshold import Tail, federated_quantile
from models.mixture.control import SUPPORT_SHARE
from models.mixture.fedem import DEFAULT_REG, SCORINGS, default_components
from models.mixture.gmm import (
    LogDensity,
    Mixture,
    chunk_rows,
    e_step,
    hard_stats,
    kmeans,
    logsumexp_rows,
    m_step,
    nearest,
    precisions,
)
from models.mixture.ridges import combine
from models.mixture.spec import MixtureJobSpec

if TYPE_CHECKING:  # a research option of the simulator's: a scoring agent never loads it
    from models.mixture.component_tails import ComponentTails

MODEL_VERSION = 1



class MixtureDetector(ThresholdedDetector):
    #: a coarser mixture of the same records scoring beside this one (models.mixture.coarse; None: none)
    coarse_: Mixture | None
    def __init__(self, components: int | None = None, reg: float = DEFAULT_REG,
                 quantile: float = MixtureJobSpec.quantile, log_transform: bool = True, n_explain: int = 3,
                 max_iter: int = 100, seed: int = 0, scoring: str = "mixture"):
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, got {scoring!r}")
        self.components, self.reg, self.quantile, self.scoring = components, reg, quantile, scoring
        self.log_transform, self.n_explain, self.max_iter, self.seed = log_transform, n_explain, max_iter, seed

    # -- fitting -----------------------------------------------------------------------------------
    def fit(self, X: np.ndarray, feature_names: list[str] | None = None,
            X_holdout: np.ndarray | None = None) -> MixtureDetector:
        """Centralised fit on pooled records (the reference of the federated training): k-means++ start,
        then EM to convergence. The threshold is the quantile of the scores of X_holdout (of X when None)."""
        X = np.asarray(X, dtype=float)
        names = feature_names or [f"f{j}" for j in range(X.shape[1])]
        mask = np.full(X.shape[1], self.log_transform)
        m = Moments.of(signed_log1p(X, mask))
        mean, scale, _ = global_standardisation([m.summary()])
        pre = Preprocessor(names, mask, mean, scale)
        K = default_components(X.shape[1]) if self.components is None else self.components
        mixture = fit_em(pre.transform(X), K, self.reg, np.random.default_rng(self.seed), self.max_iter)
        self._set(mixture, pre, 0.0)
        ref = X if X_holdout is None else X_holdout
        self.threshold_ = federated_quantile([np.asarray(self.score_samples(ref))], self.quantile)
        return self

    @classmethod
    def from_model(cls, mixture: Mixture, preprocessor: Preprocessor, threshold: float,
                   shared: np.ndarray | None = None, tail: Tail | None = None, wide: list[Mixture] | None = None,
                   scales: np.ndarray | None = None, **params: Any) -> MixtureDetector:
        """A detector for a trained mixture. `shared`: the components normal for the whole fleet (the others,
        supported by too few devices, count only for a device that holds records in them: `personalise`).
        `tail`: the fleet's exceedance curve, from which each device shrinks its own threshold
        (`models.detection.threshold.shrunk_threshold`). `wide`: the same statistics' mixtures at further ridges
        (models.mixture.ridges; same weights and means), and `scales` each mixture's (t, b) that puts their scores
        on one scale (None until calibrated: `calibrate`)."""
        det = cls(components=mixture.n_components, **params)
        det._set(mixture, preprocessor, threshold, shared, wide or [])
        det.tail_ = tail
        if scales is not None:
            det.calibrate(scales)
        return det

    def calibrate(self, scales: np.ndarray) -> MixtureDetector:
        """Score by the combined tail of the mixtures (models.mixture.ridges.combine): each one's (t, b), one row per
        mixture, the first ridge's first. Returns self."""
        scales = np.asarray(scales, dtype=float)
        if scales.shape != (self.n_scores, 2) or not np.isfinite(scales).all() or (scales[:, 1] <= 0).any():
            raise ValueError(f"scales: expected {self.n_scores} rows of (threshold, positive spread), one per "
                             f"mixture and scoring, got shape {scales.shape}")
        self.scales_: np.ndarray | None = scales
        return self

    def personalise(self, records: np.ndarray | Iterable[np.ndarray]) -> MixtureDetector:
        """Score as the device whose own records these are (original units; an array, or chunks of one so that
        a device's whole buffer needs no copy): the fleet's components, and those of the others in which at
        least SUPPORT_SHARE of its records fall (its own normal traffic, too rare in the fleet to be shared).
        Returns self."""
        K = self.mixture_.n_components
        counts, n = np.zeros(K), 0
        for X in [records] if isinstance(records, np.ndarray) else records:
            for i in range(0, len(X), 4096):
                counts += np.bincount(nearest(self.preprocessor_.transform(X[i: i + 4096]), self.mixture_.means),
                                      minlength=K)
            n += len(X)
        self._activate(self.shared_ | (counts / max(n, 1) >= SUPPORT_SHARE))
        return self

    def _activate(self, active: np.ndarray) -> None:
        """Score with these components (weights renormalised); the floor stays the whole mixture's, so scores of
        devices with different components share one scale and one threshold."""
        m = self.mixture_
        self.active_ = np.asarray(active, bool)
        self._components = np.flatnonzero(self.active_)
        weights = m.weights[self._components] / m.weights[self._components].sum()
        self._densities = [LogDensity(Mixture(weights, m.means[self._components], w.prec_chol[self._components]))
                           for w in (m, *self.wide_)]
        self._density = self._densities[0]
        self._log_weights = np.log(weights)  # taken off again by the weight-free scoring ("component")

    @property
    def n_scores(self) -> int:
        """Rows of `mixture_scores`: one per ridge, twice as many when scored both ways (SCORINGS)."""
        return (1 + len(self.wide_)) * (2 if self.scoring == "both" else 1) + (self.coarse_ is not None)

    def with_coarse(self, coarse: Mixture) -> MixtureDetector:
        """Score also by a coarser mixture of the same records (models.mixture.coarse; its score the last row of
        `mixture_scores`): the detector then scores only once calibrated. Returns self."""
        problem = mixture_problem(coarse) or (None if coarse.n_features == self.mixture_.n_features else
                                              "its features are not the mixture's")
        if problem:
            raise ValueError(f"the coarse mixture: {problem}")
        self.coarse_ = coarse
        self._coarse = LogDensity(coarse)
        self.scales_ = None
        return self

    def _set(self, m: Mixture, pre: Preprocessor, threshold: float, shared: np.ndarray | None = None,
             wide: list[Mixture] | None = None) -> None:
        if m.n_features != pre.n_features:
            raise ValueError(f"the mixture has {m.n_features} features but the preprocessing has {pre.n_features}")
        wide = list(wide or [])
        for problem in (mixture_problem(m), *(wide_problem(m, w) for w in wide)):
            if problem:
                raise ValueError(problem)
        self.mixture_, self.preprocessor_, self.wide_ = m, pre, wide
        self.floors_ = np.array([w.floor() for w in (m, *wide)])
        self.scales_ = None
        self.coarse_ = None
        #: each component's own tail (models.mixture.component_tails; None: the score as it is)
        self.component_tails_: ComponentTails | None = None
        #: (t, b) of the fleet's score and the component's, scored by the smaller tail probability (None: the
        #: component's alone)
        self.tails_scales_: np.ndarray | None = None
        self.threshold_ = float(threshold)
        self.tail_: Tail | None = None
        self.feature_names_ = list(pre.feature_names)
        self.floor_ = m.floor()
        self.shared_ = np.ones(m.n_components, bool) if shared is None else np.asarray(shared, bool)
        if self.shared_.shape != (m.n_components,) or not self.shared_.any():
            raise ValueError("the shared components must be a mask of the mixture's components, with at least one")
        self._activate(self.shared_)

    # -- scoring -----------------------------------------------------------------------------------
    def score_samples(self, X: np.ndarray) -> np.ndarray | float:
        X = np.asarray(X, dtype=float)
        if X.shape[-1] != len(self.feature_names_):
            raise ValueError(f"expected {len(self.feature_names_)} features, got {X.shape[-1]}")
        if X.ndim == 1:
            return float(self.score_samples(X[None])[0])  # type: ignore[index]
        if self.n_scores == 1:
            raw = self.mixture_scores(X)[0]
        elif self.scales_ is None:
            raise ValueError("a mixture of several ridges or scorings scores only once calibrated (calibrate)")
        else:
            raw = combine(self.mixture_scores(X), self.scales_)
        if self.component_tails_ is None:
            return raw
        own = self.component_tails_(raw, self.best_components(X))
        if self.tails_scales_ is None:
            return own
        return combine(np.vstack([raw, own]), self.tails_scales_)

    def best_components(self, X: np.ndarray) -> np.ndarray:
        """The index (in the whole mixture) of the component most responsible for each record (n, d), original
        units."""
        X = np.asarray(X, dtype=float)
        out = np.empty(X.shape[0], dtype=np.int64)
        step = chunk_rows(X.shape[1])
        for i in range(0, X.shape[0], step):
            out[i: i + step] = self._components[self._density(self.preprocessor_.transform(X[i: i + step]))
                                                .argmax(axis=1)]
        return out

    def mixture_scores(self, X: np.ndarray) -> np.ndarray:
        """Each mixture's score of records X (n, d) in original units: (M, n), the first ridge's first; scored both
        ways (SCORINGS), the mixture densities' rows, then the best components'."""
        X = np.asarray(X, dtype=float)
        M = len(self._densities)
        out = np.empty((self.n_scores, X.shape[0]))
        step = chunk_rows(X.shape[1])  # the quadratic forms' temporaries stay near CHUNK_BYTES
        ways = {"mixture": (0, None), "component": (None, 0), "both": (0, M)}[self.scoring]
        for i in range(0, X.shape[0], step):
            T = self.preprocessor_.transform(X[i: i + step])
            for j, density in enumerate(self._densities):
                A = density(T)
                if ways[0] is not None:
                    out[ways[0] + j, i: i + step] = -logsumexp_rows(A) - self.floors_[j]
                if ways[1] is not None:  # weight-free: the floor is the best component's at its own mean
                    out[ways[1] + j, i: i + step] = -(A - self._log_weights).max(axis=1) - self.floors_[j]
            if self.coarse_ is not None:
                out[-1, i: i + step] = -logsumexp_rows(self._coarse(T)) - self.coarse_.floor()
        np.maximum(out, 0.0, out=out)
        return out

    def explain(self, X: np.ndarray, top: int | None = None) -> list[list[dict[str, Any]]]:
        """Per record, the features that carry most of its distance under its most responsible component,
        with observed and expected (conditional mean) values in original units."""
        top = top or self.n_explain
        X = np.atleast_2d(np.asarray(X, dtype=float))
        T = self.preprocessor_.transform(X)
        local = self._density(T).argmax(axis=1)
        k = self._components[local]  # the component's index in the whole mixture
        P = precisions(self.mixture_.prec_chol[k])  # (n, d, d)
        r = np.einsum("nij,nj->ni", P, T - self.mixture_.means[k])
        diag = np.diagonal(P, axis1=1, axis2=2)
        contrib = r**2 / diag
        total = contrib.sum(axis=1, keepdims=True)
        share = np.divide(contrib, total, out=np.zeros_like(contrib), where=total > 0)
        expected = self.within_seen(self.preprocessor_.inverse_transform(T - r / diag))
        order = np.argsort(-share, axis=1)[:, :top]
        return [
            [
                {"feature": self.feature_names_[j], "share": round(float(share[i, j]), 4), "value": float(X[i, j]),
                 "expected": float(expected[i, j]), "component": int(k[i])}
                for j in order[i]
            ]
            for i in range(X.shape[0])
        ]

    # -- persistence -------------------------------------------------------------------------------
    def to_wire(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arrays and metadata of the model envelope (wire.model)."""
        if self.coarse_ is not None or self.component_tails_ is not None:
            raise ValueError("a coarse mixture or the components' tails score in the simulator only: no envelope")
        m = self.mixture_
        wide = {"wide_prec_chol": np.stack([w.prec_chol for w in self.wide_])} if self.wide_ else {}
        scales = {"scales": self.scales_} if self.scales_ is not None else {}
        return ({"weights": m.weights, "means": m.means, "prec_chol": m.prec_chol,
                 "shared": self.shared_.astype(np.float64), **wide, **scales, **self.preprocessor_.wire_arrays()},
                {"detector": "gmm", **self.preprocessor_.wire_meta(), "threshold": self.threshold_,
                 "quantile": self.quantile, "reg": self.reg,
                 **({"scoring": self.scoring} if self.scoring != "mixture" else {}),
                 **({"tail": self.tail_.to_meta()} if self.tail_ is not None else {})})

    @classmethod
    def from_wire(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> MixtureDetector:
        pre = Preprocessor.from_wire(arrays, meta)
        m = Mixture(np.asarray(arrays["weights"], float), np.asarray(arrays["means"], float),
                    np.asarray(arrays["prec_chol"], float))
        quantile = float(meta.get("quantile", MixtureJobSpec.quantile))
        shared = np.asarray(arrays["shared"]) > 0.5 if "shared" in arrays else None
        tail = Tail.from_meta(meta["tail"]) if meta.get("tail") is not None else None
        wide = [Mixture(m.weights, m.means, np.asarray(p, float)) for p in arrays.get("wide_prec_chol", [])]
        scales = np.asarray(arrays["scales"], float) if "scales" in arrays else None
        # the ridge the mixture was trained with (`reg`: what its samples take off again); envelopes from before it
        # travelled were trained at the default unless their job set one
        reg = float(meta.get("reg", DEFAULT_REG))
        return cls.from_model(m, pre, float(meta["threshold"]), shared, tail, wide, scales, quantile=quantile, reg=reg,
                              scoring=str(meta.get("scoring", "mixture")))

    def to_dict(self) -> dict[str, Any]:
        arrays, meta = self.to_wire()
        return {"version": MODEL_VERSION, **meta, "quantile": self.quantile,
                "arrays": {k: v.tolist() for k, v in arrays.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MixtureDetector:
        if d.get("version") != MODEL_VERSION or d.get("detector") != "gmm":
            raise ValueError(f"not a version-{MODEL_VERSION} mixture model")
        det = cls.from_wire({k: np.array(v) for k, v in d["arrays"].items()}, d)
        det.quantile = d.get("quantile", det.quantile)
        return det


def fit_em(T: np.ndarray, K: int, reg: float, rng: np.random.Generator, max_iter: int = 100,
           tol: float = 1e-4, hard_iter: int = 0) -> Mixture:
    """Pooled EM on standardised records from a k-means++ start (stops when the mean log-likelihood
    gains less than tol). The first `hard_iter` of the `max_iter` iterations are k-means iterations (the
    federated algorithm's k-means rounds: every record to its nearest mean, then the M-step)."""
    _, labels = kmeans(T, K, rng)
    m = m_step(*hard_stats(T, labels, K), reg)
    for _ in range(min(hard_iter, max_iter)):
        closest = nearest(T, m.means)
        if np.array_equal(closest, labels):
            break
        labels = closest
        m = m_step(*hard_stats(T, labels, K), reg)
    last = -np.inf
    for _ in range(max(max_iter - hard_iter, 0)):
        R, S1, S2, ll = e_step(T, m)
        m = m_step(R, S1, S2, reg)
        if ll / len(T) - last < tol:
            break
        last = ll / len(T)
    return m


def wide_problem(m: Mixture, wide: Mixture) -> str | None:
    """Why `wide` cannot score beside `m` (None when it can): the same statistics at another ridge have the same
    weights and means."""
    if wide.prec_chol.shape != m.prec_chol.shape or not (np.array_equal(wide.weights, m.weights)
                                                          and np.array_equal(wide.means, m.means)):
        return "a further ridge's mixture must have the weights, means and shapes of the first"
    return mixture_problem(wide)


def mixture_problem(m: Mixture) -> str | None:
    """Why a mixture cannot be a model (None when it can): shapes, finiteness, weights, precision factors."""
    K = len(m.weights)
    if m.means.ndim != 2 or m.means.shape[0] != K or m.prec_chol.shape != (K, m.means.shape[1], m.means.shape[1]):
        return "mixture arrays do not agree in shape"
    if not all(np.isfinite(a).all() for a in (m.weights, m.means, m.prec_chol)):
        return "the mixture has non-finite numbers"
    if (m.weights <= 0).any() or abs(m.weights.sum() - 1) > 1e-6:
        return "mixture weights must be positive and sum to 1"
    diag = np.diagonal(m.prec_chol, axis1=1, axis2=2)
    if (diag <= 0).any() or np.abs(np.tril(m.prec_chol, -1)).max(initial=0) > 0:
        return "precision factors must be upper triangular with a positive diagonal"
    return None
