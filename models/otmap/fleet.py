"""A fleet's transport map onto its promoted mixture, as the coordinator's `otmap` job learns it (issue 26, point
5), and the same run in process (`simulate_fleet_map`: what the deployment must equal).

The map lives in the promoted detector's standardised space: the fleet's records are standardised with the
detector's own preprocessing, Q is drawn from the detector's mixture with the job's seed (no traffic moves), and
the statistics phase's counts, sums and sums of squares give each device's weight, the start map's moments and
each device's bound on what it may upload (models.otmap.objective.grad_bound)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.core.federated import State
from models.detection.preprocessing import RECORD_DTYPE, Preprocessor, signed_log1p
from models.detection.screening import DEFAULT_GUARD, Guard, federation_statistics
from models.otmap.fedmm import ALGORITHMS, FedMMOT
from models.otmap.field import MappedDetector, mixture_samples
from models.otmap.quantile import histogram, quantile_map
from models.otmap.simulator import train

#: where a map starts: the per-feature monotone map onto Q's quantiles from the fleet's summed histograms
#: (models.otmap.quantile; the job's histogram phase), the per-feature affine map matching the fleet's means and
#: variances (its statistics phase), or FedMM-OT's own start
STARTS = ("quantile", "moments", "none")

#: the stream of the job's seed that draws Q (the rounds' sample and the maps' start draw from the seed itself)
TARGET_STREAM = 26


def target(detector: Any, n: int, seed: int) -> np.ndarray:
    """Q: n samples of the detector's mixture (its standardised space, its ridge taken off: `mixture_samples`),
    drawn from (seed, TARGET_STREAM)."""
    mixture = getattr(detector, "mixture_", None)
    if mixture is None:
        raise ValueError(f"a transport map is learnt onto a promoted mixture (gmm), not a "
                         f"{type(detector).__name__}")
    return mixture_samples(mixture, n, np.random.default_rng((seed, TARGET_STREAM)), detector.reg)


def fleet_moments(pre: Preprocessor, count: np.ndarray, total: np.ndarray,
                  sumsq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From the devices' statistics (count (n,), sums and sums of squares (n, d) of their transformed records):
    the pooled per-feature mean and variance in the detector's standardised space, and each device's E||x||^2
    there (an unset value is standardised to 0 and adds nothing)."""
    count = np.asarray(count, dtype=float)
    inv = 1.0 / pre.scale
    m1 = (np.asarray(total, dtype=float) - np.outer(count, pre.mean)) * inv  # sums of standardised values
    m2 = (np.asarray(sumsq, dtype=float) - 2 * np.asarray(total, dtype=float) * pre.mean
          + np.outer(count, pre.mean**2)) * inv**2
    n = count.sum()
    mean = m1.sum(axis=0) / n
    var = np.maximum(m2.sum(axis=0) / n - mean**2, 0.0)
    return mean, var, m2.sum(axis=1) / np.maximum(count, 1.0)


def simulate_fleet_map(detector: Any, parts: Sequence[np.ndarray], algorithm: str = "fedmm-ot", rounds: int = 20,
                       fraction: float = 0.1, seed: int = 0, params: dict[str, Any] | None = None,
                       target_records: int = 4096, start: str = "quantile",
                       guard: Guard = DEFAULT_GUARD) -> tuple[MappedDetector, State]:
    """The `otmap` job in process on the devices' raw records (in the detector's features): their statistics as
    agents send them, their records standardised by the detector as agents hold them (float32), the start
    (`STARTS`: with "quantile", the map from their summed histograms, applied to their records before the rounds),
    the rounds of models.otmap.simulator.train. Returns the mapped detector and the last broadcast."""
    if start not in STARTS:
        raise ValueError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
    pre = detector.preprocessor_
    stored = [np.asarray(P, dtype=RECORD_DTYPE) for P in parts]
    T = [signed_log1p(np.asarray(P, dtype=float), pre.log_mask) for P in stored]
    count = np.array([len(t) for t in T], dtype=float)
    total, sumsq = np.stack([t.sum(axis=0) for t in T]), np.stack([(t**2).sum(axis=0) for t in T])
    fed = federation_statistics(count, total, sumsq, guard)
    alg: FedMMOT = ALGORITHMS[algorithm](pre.n_features, **(params or {}))
    X = [pre.transform(P).astype(RECORD_DTYPE) for P in stored]
    Y = target(detector, target_records, seed)
    moments = fleet_moments(pre, count, total, sumsq)[:2] if start == "moments" else None
    qmap = quantile_map(np.sum([histogram(x) for x in X], axis=0), Y) if start == "quantile" else None
    broadcast = train(alg, X if qmap is None else [qmap(x) for x in X], Y, rounds, fraction, seed, fed.weight,
                      moments=moments)
    return MappedDetector(detector, alg.layout, broadcast["omega"], qmap), broadcast
