"""In-process federated dictionary learning: the statistics phase, the rounds and the threshold phase as the
coordinator and the agents run them (the same functions), for `fedsentry simulate pca --detector dict`.

The statistics phase and the weight caps are the PCA simulator's (models.pca.simulator.prepare_clients); the
label-free threshold is read, as for PCA, from each device's histogram of its training records' scores, checked
and combined by models.detection.screening.robust_threshold."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from models.core.rounds import BatchedPool, Hooks, Rounds, simulate
from models.detection.metrics import detection_report
from models.detection.preprocessing import RECORD_DTYPE
from models.detection.screening import DEFAULT_GUARD, admitted_histograms, robust_threshold
from models.detection.threshold import sparse_histogram
from models.dictionary.codes import lasso_codes, objective_terms
from models.dictionary.detector import DictionaryDetector
from models.dictionary.fedmm import FedMMDictionary
from models.pca.simulator import prepare_clients


def device_records(X: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The algorithm's client data for a list of devices (a batch): their standardised records as devices hold them."""
    data = np.empty(len(X), dtype=object)
    for i, x in enumerate(X):
        data[i] = np.asarray(x, dtype=RECORD_DTYPE)
    return {"X": data}


def objective(X: list[np.ndarray], weight: np.ndarray, theta: np.ndarray, lam: float, eta: float) -> float:
    """Eq. 28 at theta: the clients' weighted mean loss per record plus eta ||theta||^2 (label-free: what compares
    dictionaries of the same penalties)."""
    losses = [float(objective_terms(x, lasso_codes(np.asarray(x, float), theta, lam), theta, lam).mean())
              if len(x) else 0.0 for x in X]
    return float(np.average(losses, weights=weight) + eta * np.sum(theta**2))


def simulate_dictionary(
    train_parts: list[np.ndarray],
    X_test: np.ndarray,
    y_test: np.ndarray,
    feature_names: list[str],
    algorithm: str = "fedmm-dl",
    rounds: int = 100,
    fraction: float = 0.1,
    quantile: float = 0.99,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    on_round: Callable[[dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Train a dictionary on partitioned training records (federated, or "centralized": batch alternating
    minimisation on the pooled records, as many iterations as rounds) and evaluate it on labelled test records at
    the label-free threshold."""
    if algorithm not in ("fedmm-dl", "centralized"):
        raise ValueError(f"unknown dict algorithm {algorithm!r}; choose from fedmm-dl, centralized")
    guard = DEFAULT_GUARD
    clients = prepare_clients(train_parts, feature_names, guard=guard)
    d = len(feature_names)
    params = dict(params or {})
    t0 = time.perf_counter()
    if algorithm == "centralized":
        alg = FedMMDictionary(d, **{**params, "gamma": 1.0})
        pooled = [np.vstack(clients.X)]
        loop = _run(alg, pooled, np.ones(1), np.ones(1), rounds, 1.0, seed, None, on_round)
    else:
        alg = FedMMDictionary(d, **params)
        loop = _run(alg, clients.X, clients.weight, clients.claimed, rounds, fraction, seed, clients.caps.state(),
                    on_round, clients.diag)
    seconds = (time.perf_counter() - t0) / max(rounds, 1)
    theta = alg.consensus(loop.broadcast)
    det = DictionaryDetector.from_model(theta, clients.preprocessor, 1.0, lam=alg.lam, quantile=quantile)
    scores = [det.losses(x) for x in clients.X]
    kept, weight = admitted_histograms([sparse_histogram(s) for s in scores], [len(s) for s in scores],
                                       clients.weight)
    det.threshold_ = robust_threshold(kept, weight, quantile, guard.device_trim, guard.colluders)
    report = detection_report(y_test, det.score_samples(X_test), det.threshold_)
    return {"algorithm": algorithm, "atoms": alg.atoms, "lam": alg.lam, "eta": alg.eta, "beta": alg.beta,
            "alpha": alg.alpha, "bits": alg.bits, "rounds": rounds, "seconds_per_round": seconds,
            "upload_bytes_per_client_round": alg.upload_bytes() if algorithm != "centralized" else None,
            "rejected_uploads": int(loop.server.get("rejected", 0)),
            "objective": objective(clients.X, clients.weight, theta, alg.lam, alg.eta),
            "threshold": det.threshold_, **report, "detector": det}


def _run(alg: FedMMDictionary, X: list[np.ndarray], weight: np.ndarray, claimed: np.ndarray, rounds: int,
         fraction: float, seed: int, caps: dict[str, np.ndarray] | None,
         on_round: Callable[[dict[str, float]], None] | None, diag: np.ndarray | None = None) -> Rounds:
    """The rounds as the coordinator runs them: the fleet attached (weights, share sampled, upload bounds), the
    answers weighted by their claimed records through the pipeline's caps."""
    loop = Rounds.start(alg, len(X), fraction, np.random.default_rng(seed))
    loop.server, loop.broadcast = alg.attach_fleet(loop.server, weight, fraction, diag)
    if caps is not None:
        loop.server.update(caps)
    pool = BatchedPool.of(alg, device_records(X), loop.broadcast)

    def observe(ids: np.ndarray, done: Any) -> None:
        if on_round is not None:
            on_round({"round": loop.round})

    simulate(loop, pool, np.asarray(claimed, dtype=float), rounds, Hooks(observe=observe))
    return loop
