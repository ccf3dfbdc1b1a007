"""In-process federated PCA: the same client and server steps the MQTT deployment runs, in a loop.

Seeded and reproducible. The sampled clients of a round are processed as one batch (the client step
is vectorised over its leading axis), which is what makes a 100-client round take milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.core.federated import State
from models.core.linalg import subspace_distance
from models.core.rounds import BatchedPool, Hooks, RoundResult, Rounds, simulate
from models.detection.attacks import NO_ADVERSARIES, Adversaries
from models.detection.metrics import detection_report
from models.detection.preprocessing import Moments, Preprocessor, as_device_records, signed_log1p
from models.detection.robust import TRIM_CRITERIA, distance_masks, residual_mask, residuals, second_moment
from models.detection.screening import (
    DEFAULT_GUARD,
    Guard,
    WeightCaps,
    admitted_histograms,
    admitted_summaries,
    federation_statistics,
    robust_threshold,
    stack_summaries,
    value_bound,
)
from models.detection.threshold import EDGES, error_histogram, quantile_from_histogram, sparse_histogram
from models.kernel import DEFAULT_COMPONENTS, KERNELS, RandomFourierFeatures
from models.pca import PCAAlgorithm, make_algorithm
from models.pca.baselines import centralized_pca, local_pca
from models.pca.detector import PCADetector
from models.pca.support import kept


@dataclass
class ClientData:
    """What the clients hold after the federated statistics phase (standardised with global stats; lifted
    by random Fourier features when `lift` is set, and then C_i is the lifted records' uncentred second
    moment)."""

    preprocessor: Preprocessor
    X: list[np.ndarray]  # standardised (and lifted) records per client
    C: np.ndarray  # (N, d, d) second moments (of the kept records)
    weight: np.ndarray  # (N,) n_i / mean(n), capped (models.detection.screening)
    caps: WeightCaps  # what the pipeline's cap stage makes of the records each client claims (`claimed`)
    claimed: np.ndarray  # (N,) the records each client claimed in the statistics phase
    diag: np.ndarray  # (N, d) diag(C_i) and (N,) the bound on tr(C_i): what the server checks uploads against
    trace: np.ndarray
    keep: list[np.ndarray] | None = None  # records kept by a distance trim
    lift: RandomFourierFeatures | None = None

    def kept(self, i: int) -> np.ndarray:
        return self.X[i] if self.keep is None else self.X[i][self.keep[i]]

    @property
    def pooled(self) -> np.ndarray:
        return np.einsum("b,bij->ij", self.weight, self.C) / self.weight.sum()


def prepare_clients(parts: list[np.ndarray], feature_names: list[str], log_transform: bool = True,
                    trim: float = 0.0, trim_by: str = "distance", guard: Guard = DEFAULT_GUARD,
                    lift: RandomFourierFeatures | None = None,
                    adversaries: Adversaries = NO_ADVERSARIES) -> ClientData:
    """Federated statistics phase: each client's count, sum and sum of squares give the global
    standardisation, its weight and its trace bound (models.detection.screening, as the coordinator computes
    them); each client then computes its own second moment around the global mean (over the records a
    distance trim keeps, see models.detection.robust).

    With a lift, each client maps its standardised records through it and C_i is their uncentred second
    moment; the upload bounds are then the map's a-priori ones (diag(C_i) <= 2/D, tr(C_i) <= 2), which is
    all the coordinator knows too (the statistics phase precedes the lift).

    The adversaries' claims (models.detection.attacks: inflate) pass the coordinator's checks
    (models.detection.screening) or the
    run stops saying why."""
    parts = [as_device_records(P) for P in parts]  # as the devices' training buffers hold them
    d = parts[0].shape[1]
    mask = np.full(d, log_transform)
    T = [signed_log1p(P, mask) for P in parts]
    moments = [Moments.of(t) for t in T]
    claims = adversaries.summaries([m.summary() for m in moments], guard.max_records)
    fed = federation_statistics(*stack_summaries(admitted_summaries(claims, guard, value_bound(log_transform))),
                                guard)
    mean, scale = fed.mean, fed.scale
    pre = Preprocessor(list(feature_names), mask, mean, scale)
    X = [(t - mean) / scale for t in T]
    if lift is not None:
        keep = distance_masks(X, trim) if trim > 0 and trim_by == "distance" else None
        F = [lift.transform(x) for x in X]
        C = np.stack([second_moment(f if keep is None else f[keep[i]]) for i, f in enumerate(F)])
        n = len(F)
        diag, trace = np.full((n, lift.n_components), lift.diag_bound), np.full(n, lift.trace_bound)
        return ClientData(pre, F, C, fed.weight, fed.caps, fed.count, diag, trace, keep, lift)
    if trim > 0 and trim_by == "distance":
        keep = distance_masks(X, trim)
        C = np.stack([second_moment(x[k]) for x, k in zip(X, keep)])
        diag = np.diagonal(C, axis1=1, axis2=2).copy()
        return ClientData(pre, X, C, fed.weight, fed.caps, fed.count, diag, diag.sum(axis=1), keep)
    C = np.stack([m.second_moment(mean, scale) for m in moments])
    return ClientData(pre, X, C, fed.weight, fed.caps, fed.count, fed.diag, fed.trace)


def federated_threshold(clients: ClientData, Z: np.ndarray, quantile: float, trim: float = 0.0,
                        guard: Guard = DEFAULT_GUARD, adversaries: Adversaries = NO_ADVERSARIES) -> float:
    """The label-free threshold from per-client histograms of the (kept) training errors (errors never
    pooled), checked and combined as the coordinator does (models.detection.screening.robust_threshold)."""
    histograms = []
    for i in range(len(clients.X)):
        X = clients.kept(i)
        if trim > 0 and clients.keep is None:  # residual trim: each client drops its worst share
            X = X[residual_mask(X, Z, trim)]
        histograms.append(sparse_histogram(residuals(X, Z)))
    claimed = [int(c.sum()) for _, c in histograms]
    histograms = adversaries.histograms(histograms, len(EDGES) - 1)
    kept, weight = admitted_histograms(histograms, claimed, clients.weight)
    return robust_threshold(kept, weight, quantile, guard.device_trim, guard.colluders)


@dataclass
class FederatedRun:
    Z: np.ndarray
    history: list[dict[str, float]]
    seconds_per_round: float
    upload_bytes_per_client_round: int
    broadcast: State = field(repr=False, default_factory=dict)
    rejected: int = 0  # uploads the server refused (an algorithm that checks them)
    answers: int = 0  # uploads the rounds received


def run_federated(
    algorithm: PCAAlgorithm,
    clients: ClientData,
    rounds: int,
    fraction: float,
    seed: int = 0,
    trim: float = 0.0,
    reference: np.ndarray | None = None,
    on_round: Callable[[dict[str, float]], None] | None = None,
    byzantine: float = 0.0,
    attack: str = "random",
    dropout: float = 0.0,
    adversaries: Adversaries = NO_ADVERSARIES,
    quantile: float = 0.99,
) -> FederatedRun:
    """Drive an algorithm for `rounds` rounds with a fraction of the clients sampled each round.

    An algorithm with `support_trim` (FedMM) runs half the rounds, then its support phase (`support_phase`, every
    device; the cap is the fleet's label-free threshold at `quantile` under the consensus so far), then one round
    with every device and the other half.

    byzantine: share of the clients (drawn at random) that send poisoned uploads (models.detection.attacks.poison, kind
    `attack`) every round they are sampled; adversaries: the first clients and their attack (models.detection.attacks);
    dropout: share of the sampled clients that never answer (chosen afresh each round)."""
    rng = np.random.default_rng(seed)
    chaos = np.random.default_rng(seed + 7919)  # attacks and dropouts do not disturb the sampling
    N = len(clients.X)
    residual_trim = trim > 0 and clients.keep is None
    support = bool(getattr(algorithm, "support_trim", False))
    if support and (trim > 0 or byzantine > 0):
        raise ValueError("support_trim leaves records out itself: run it without --trim and without byzantine uploads")
    # only a residual trim or the support phase rewrites C_i (a copy of a lifted C is N D^2 numbers: 800 MB for
    # D = 1000)
    data = {"C": adversaries.second_moments(clients.C.copy() if residual_trim or support else clients.C),
            "weight": clients.weight}
    C = data["C"]
    pooled = clients.pooled
    loop = Rounds.start(algorithm, N, fraction, rng)
    loop.server = algorithm.attach_bounds(loop.server, clients.diag, clients.trace)
    pool = BatchedPool.of(algorithm, data, loop.broadcast)
    history: list[dict[str, float]] = []
    bad = set(chaos.choice(N, int(round(byzantine * N)), replace=False).tolist()) if byzantine > 0 else set()
    poisoner = Adversaries(attack=attack) if bad else adversaries

    def answering(idx: np.ndarray) -> np.ndarray:  # the sampled clients that never answer, chosen afresh
        return np.sort(chaos.choice(idx, max(len(idx) - int(round(dropout * len(idx))), 0), replace=False))

    def before(idx: np.ndarray, rounds: Rounds) -> None:  # residual trim, re-evaluated with the current Z
        if rounds.round > 1:
            Zc = algorithm.consensus(rounds.broadcast)
            for i in idx:
                C[i] = second_moment(clients.X[i][residual_mask(clients.X[i], Zc, trim)])

    def tamper(idx: np.ndarray, broadcast: State) -> Callable[[State], State] | None:
        evil = np.array([i in bad for i in idx], dtype=bool) if bad else adversaries.among(idx)
        return poisoner.tamper(evil, broadcast, chaos)

    answers = [0]

    def observe(idx: np.ndarray, done: RoundResult) -> None:
        answers[0] += len(idx)
        Z = algorithm.consensus(done.broadcast)
        entry = {"round": len(history) + 1, "objective": _objective(pooled, Z)}
        if reference is not None:
            entry["subspace_distance"] = subspace_distance(Z, reference)
        history.append(entry)
        if on_round:
            on_round(entry)

    loop.server.update(clients.caps.state())  # the answers' claimed records become capped weights in the pipeline
    hooks = Hooks(answering if dropout > 0 else None, before if residual_trim else None, tamper, observe)
    if support:
        simulate(loop, pool, clients.claimed, rounds // 2, hooks)
        C[:] = adversaries.second_moments(support_phase(algorithm, loop.server, loop.broadcast, clients, quantile,
                                                        adversaries))
        simulate(loop, pool, clients.claimed, rounds - rounds // 2, hooks, everyone_first=True)
    else:
        simulate(loop, pool, clients.claimed, rounds, hooks)
    return FederatedRun(algorithm.consensus(loop.broadcast), history, sum(hooks.seconds) / max(rounds, 1),
                        algorithm.upload_bytes(), loop.broadcast, int(loop.server.get("rejected", 0)), answers[0])


def support_phase(algorithm: PCAAlgorithm, server: State, broadcast: State, clients: ClientData, quantile: float,
                  adversaries: Adversaries = NO_ADVERSARIES) -> np.ndarray:
    """Each device's second moment with the records the others' statistics do not explain left out
    (models.pca.support.kept): the sum over the records it keeps over all its records, so that what it keeps weighs
    as before and its statistic stays below the one the statistics phase bounded. The cap is the fleet's label-free
    threshold under the consensus so far, the statistics those the server holds (`held`). Returns the new (N, d, d)
    second moments."""
    Z = algorithm.consensus(broadcast)
    cap = federated_threshold(clients, Z, quantile, adversaries=adversaries)
    ids, held, weight = algorithm.held(server)  # type: ignore[attr-defined]
    row = {int(c): r for r, c in enumerate(ids)}
    colluders = int(getattr(algorithm, "colluders", DEFAULT_GUARD.colluders))
    masks = [kept(x, held, weight, row.get(i), cap, algorithm.rank, colluders) for i, x in enumerate(clients.X)]
    return np.stack([second_moment(x[m]) * m.mean() for x, m in zip(clients.X, masks)])


def _objective(pooled: np.ndarray, Z: np.ndarray) -> float:
    """Mean reconstruction error per training record of an orthonormal Z: tr(C) - tr(Z'CZ)."""
    return float(np.trace(pooled) - np.trace(Z.T @ pooled @ Z))


def simulate_pca(
    train_parts: list[np.ndarray],
    X_test: np.ndarray,
    y_test: np.ndarray,
    feature_names: list[str],
    algorithm: str = "fedpg",
    rank: int = 3,
    rounds: int = 100,
    fraction: float = 0.1,
    quantile: float = 0.99,
    seed: int = 0,
    trim: float = 0.0,
    params: dict[str, Any] | None = None,
    on_round: Callable[[dict[str, float]], None] | None = None,
    trim_by: str = "distance",
    kernel: str = "none",
    kernel_features: int = DEFAULT_COMPONENTS,
    kernel_gamma: float | None = None,
    adversaries: Adversaries = NO_ADVERSARIES,
    private: bool = False,
    dropout: float = 0.0,
    dp: Any = None,
) -> dict[str, Any]:
    """Train one algorithm on partitioned training records and evaluate it on labelled test records.

    private: the coordinator learns only sums (models.pca.private: FedMM's statistic summed whole, in one round),
    `dropout` of the devices vanishing after each upload. dp (a models.private.accounting.Budget): the same sums
    with Gaussian noise (models.private.dp), each device's share added before masking in private mode, the whole
    noise added by the coordinator otherwise.

    adversaries: the first devices and their attack (models.detection.attacks; their records, for a data attack, are
    already in `train_parts`).

    kernel="rff": kernel PCA through `kernel_features` random Fourier features of width `kernel_gamma`
    (None: models.kernel.default_gamma), the map seeded with `seed`, as a job with these settings."""
    if private or dp is not None:
        if (params or {}).get("support_trim"):
            raise ValueError("support_trim needs each device's statistic on the server: not in private mode or with "
                             "differential privacy (the coordinator sees sums)")
        if kernel != "none" or trim or adversaries.count:
            mode = "private mode" if private else "differential privacy"
            raise ValueError(f"{mode} runs linear PCA without --trim or --adversaries so far")
        from models.pca.private import simulate_private_pca

        return simulate_private_pca(train_parts, X_test, y_test, feature_names, rank, quantile, DEFAULT_GUARD, seed,
                                    dropout, dp, private)
    if trim_by not in TRIM_CRITERIA:
        raise ValueError(f"unknown trim criterion {trim_by!r}; choose from {', '.join(TRIM_CRITERIA)}")
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose from {', '.join(KERNELS)}")
    lift = None
    if kernel == "rff":
        lift = RandomFourierFeatures(len(feature_names), kernel_features, kernel_gamma, seed)
    clients = prepare_clients(train_parts, feature_names, trim=trim, trim_by=trim_by, lift=lift,
                              adversaries=adversaries)
    d = clients.C.shape[1]
    if not 1 <= rank < d:
        what = "kernel features" if lift else "number of features"
        raise ValueError(f"rank must be between 1 and {d - 1} (the {what} - 1), got {rank}")
    reference = centralized_pca(clients.C, clients.weight, rank)
    out: dict[str, Any] = {"algorithm": algorithm, "rank": rank, "kernel": kernel,
                           **({"rff": lift.params()} if lift else {})}
    if algorithm == "centralized":
        t0 = time.perf_counter()
        Z = centralized_pca(clients.C, clients.weight, rank)
        spr = time.perf_counter() - t0
        entry = {"round": 1, "subspace_distance": 0.0, "objective": _objective(clients.pooled, Z)}
        if on_round:
            on_round(entry)
        out.update(rounds=1, history=[entry], seconds_per_round=spr, upload_bytes_per_client_round=d * d * 8)
        return {**out, **_evaluate(clients, Z, X_test, y_test, quantile, trim), "subspace_distance": 0.0}
    if algorithm == "local":
        t0 = time.perf_counter()
        Zs = list(local_pca(clients.C, rank))
        spr = time.perf_counter() - t0
        sds = [subspace_distance(Z, reference) for Z in Zs]
        objs = [_objective(clients.pooled, Z) for Z in Zs]
        entry = {"round": 1, "subspace_distance": float(np.mean(sds)), "objective": float(np.mean(objs))}
        if on_round:
            on_round(entry)
        reports = [_evaluate(clients, Z, X_test, y_test, quantile, trim, own=i) for i, Z in enumerate(Zs)]
        avg = {k: float(np.mean([r[k] for r in reports])) for k in reports[0]}
        out.update(rounds=1, history=[entry], seconds_per_round=spr, upload_bytes_per_client_round=0)
        return {**out, **avg, "subspace_distance": entry["subspace_distance"]}
    alg = make_algorithm(algorithm, d, rank, **(params or {}))
    run = run_federated(alg, clients, rounds, fraction, seed, trim, reference, on_round, adversaries=adversaries,
                        quantile=quantile)
    out.update(rounds=rounds, history=run.history, seconds_per_round=run.seconds_per_round,
               upload_bytes_per_client_round=run.upload_bytes_per_client_round, rejected_uploads=run.rejected,
               upload_bytes_per_device_round=run.answers * run.upload_bytes_per_client_round
               / (len(clients.X) * rounds))
    return {**out, **_evaluate(clients, run.Z, X_test, y_test, quantile, trim, adversaries=adversaries),
            "subspace_distance": subspace_distance(run.Z, reference)}


def _evaluate(clients: ClientData, Z: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, quantile: float,
              trim: float = 0.0, own: int | None = None,
              adversaries: Adversaries = NO_ADVERSARIES) -> dict[str, float]:
    if own is None:
        threshold = federated_threshold(clients, Z, quantile, trim, adversaries=adversaries)
    else:
        threshold = quantile_from_histogram(error_histogram(residuals(clients.kept(own), Z)), quantile)
    det = PCADetector.from_model(Z, clients.preprocessor, threshold, clients.lift, quantile=quantile)
    report = detection_report(y_test, det.score_samples(X_test), threshold)
    return {"threshold": threshold, **report}
