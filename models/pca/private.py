"""Private mode for PCA in the simulator: the coordinator learns only sums (issue 23).

FedPE and FedPG upload each device's basis, which does not sum to anything; FedMM uploads S_i = C_i Q, and the
server rebuilds the pooled second moment's span from their completions. When the coordinator can see a sum of the
devices' statistics, their weighted second moments themselves sum to the pooled second moment, FedMM's
statistic whole: one secure sum of every device's w_i C_i (the upper triangle, d(d+1)/2 values) and the server's
step is its eigendecomposition, the pooled subspace exactly, in one round. The statistics phase and the threshold
phase are secure sums too (models.detection.private): the threshold is the pooled exceedance curve's, nothing
winsorised (a trimmed mean of the devices' quantiles needs each device's).

With differential privacy the same four sums carry Gaussian noise (models.private.dp): each device weighs 1 and
clips its second moment to norm d (a record at one standard deviation in every feature); the server divides by
the fleet's size and eigendecomposes the noisy sum (post-processing).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from models.core.linalg import subspace_distance, top_eigvecs
from models.detection.metrics import detection_report
from models.detection.preprocessing import as_device_records
from models.detection.private import NoisySum, largest_weight, noisy_job, private_clients, private_tail
from models.detection.robust import residuals, second_moment
from models.detection.screening import Guard
from models.detection.threshold import sparse_histogram
from models.pca.detector import PCADetector
from models.private.transport import SecureTransport

if TYPE_CHECKING:
    from models.private.accounting import Budget

#: private mode's announced bound on standardised values: a device's second moment is divided by its square
VALUE_BOUND = 64.0


def simulate_private_pca(train_parts: list[np.ndarray], X_test: np.ndarray, y_test: np.ndarray,
                         feature_names: list[str], rank: int, quantile: float, guard: Guard, seed: int = 0,
                         dropout: float = 0.0, dp: Budget | None = None, secure: bool = True) -> dict[str, Any]:
    """Train and evaluate PCA in private mode (see the module): every device takes part in each of its phases.
    dp: with Gaussian noise on the four sums at this budget (`secure`: each device adds its share before masking;
    otherwise the coordinator sums in the clear and adds it)."""
    t0 = time.perf_counter()
    parts = [as_device_records(p) for p in train_parts]
    n = len(parts)
    if n < 2:
        raise ValueError("private mode sums at least 2 devices")
    d = len(feature_names)
    ledger = SecureTransport({}, 1.0, dropout, seed, secure=secure)
    if dp is not None:
        from models.private.accounting import ledger_for

        sums = len(noisy_job(d, quantile, noisy_family(d)))  # as the coordinator plans them
        ledger.noise = ledger_for(dp, {1.0: sums}, n, 1.0, secure, seed).noise({})
    clients = private_clients(parts, feature_names, guard, ledger)
    if ledger.noise is None:  # the threshold's sum: its weighted shares are within the largest capped weight
        ledger.clip = largest_weight(clients.caps, clients.claimed)
    if not 1 <= rank < d:
        raise ValueError(f"rank must be between 1 and {d - 1} (the number of features - 1), got {rank}")
    moments = np.stack([own_moment(x) for x in clients.X])  # each device's, on the device
    if ledger.noise is None:
        secure_sum = ledger.phase(MOMENT_SCALES, largest_weight(clients.caps, clients.claimed), 5)
        total = secure_sum(np.arange(n), moment_uploads(clients.weight, moments))
        W = float(total["w"][0])
    else:  # each device weighs 1: the fleet's size divides
        secure_sum = noisy_moments(d).transport(ledger, 5)
        total, W = secure_sum(np.arange(n), {"C": moments}), float(n)
    Z = pooled_subspace(total["C"][0] / W, d, rank)
    # what the sum would be without fixed point: the simulator's yardstick
    reference = top_eigvecs(symmetric(clients.weight @ moments / clients.weight.sum(), d), rank)[1]
    histograms = [sparse_histogram(residuals(x, Z)) for x in clients.X]
    # no clip of the devices' curves (models.detection.tail_clip): plaintext PCA's threshold is another rule
    # (robust_threshold), and the clip cost ton-iot's 11 devices 1.09 -> 4.58 % false positives
    # (benchmarks/results/private-threshold-clip.json)
    threshold, _ = private_tail(histograms, clients.weight, quantile, 0.0, ledger)
    det = PCADetector.from_model(Z, clients.preprocessor, threshold, None, quantile=quantile)
    sent = ledger.phase_bytes + secure_sum.sent[0] * n
    out = {"algorithm": "fedmm", "private": secure, "rank": rank, "Z": Z, "kernel": "none", "rounds": 1, "history": [],
           "seconds_per_round": time.perf_counter() - t0, "upload_bytes_per_client_round": secure_sum.sent[0],
           "all_device_rounds": 1, "threshold": threshold,
           # statistics (2 sums), the moments, the threshold (its window and its sum: one phase, counted once)
           "upload_bytes_per_device_round": sent / (n * 4),
           "upload_bytes_by_step": ledger.per_step(n * 4),
           **detection_report(y_test, det.score_samples(X_test), threshold)}
    if secure:
        out["secure_sum"] = {"device_cpu_seconds_max": float(max(secure_sum.device_cpu)),
                             "coordinator_cpu_seconds_median": float(np.median(secure_sum.server_cpu)),
                             "dropout": dropout, "clipped_values": ledger.clipped + secure_sum.clipped}
    if dp is not None and ledger.noise is not None:
        from models.private.accounting import report

        out["dp"] = report(ledger.noise.ledger, dp)
    # the secure sum's fixed-point error (with differential privacy: and the noise and clipping)
    out["subspace_distance"] = subspace_distance(Z, reference)
    return out


def noisy_family(d: int) -> dict[str, NoisySum]:
    """PCA's own noisy sum in a job with differential privacy (models.detection.private.noisy_job has the others):
    every device's clipped second moment, weighing 1."""
    return {"moments": noisy_moments(d)}


def noisy_moments(d: int) -> NoisySum:
    """Differential privacy's sum of the devices' second moments over `d` features (the upper triangle), each
    clipped to L2 norm d (a record at one standard deviation in every feature)."""
    return NoisySum({"C": (d * (d + 1) // 2,)}, {"C": VALUE_BOUND**2}, {"C": float(d)})


#: the secure sum of the devices' weighted second moments: over the bound's square, and their weights
MOMENT_SCALES = {"C": VALUE_BOUND**2, "w": 1.0}


def own_moment(X: np.ndarray) -> np.ndarray:
    """A device's second moment of its standardised records, its upper triangle (np.triu_indices order)."""
    return second_moment(X)[np.triu_indices(X.shape[1])]


def moment_uploads(weight: np.ndarray, moments: np.ndarray) -> dict[str, np.ndarray]:
    """Per device (a batch): its weighted second moment and its weight."""
    weight = np.asarray(weight, dtype=float)
    return {"C": weight[:, None] * moments, "w": weight}


def pooled_subspace(C: np.ndarray, d: int, rank: int) -> np.ndarray:
    """The top `rank` eigenvectors of the pooled second moment (its upper triangle): FedMM's statistic whole."""
    return top_eigvecs(symmetric(C, d), rank)[1]


def symmetric(upper: np.ndarray, d: int) -> np.ndarray:
    """The symmetric d x d matrix whose upper triangle (np.triu_indices order) is `upper`."""
    out = np.zeros((d, d))
    out[np.triu_indices(d)] = upper
    return out + np.triu(out, 1).T
